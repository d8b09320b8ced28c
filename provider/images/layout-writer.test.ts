import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { LOOPBACK_PULLS } from '../../test/helpers/fake-registry.js';
import { ImageService } from './image-service.js';
import { writeLayout } from './layout-writer.js';
import { importLayout } from './oci-layout.js';
import { ImageStore } from './store.js';

const MAX = 1 << 30;

t.test('a written layout imports under its names, and its files come out of the store byte for byte', async (t) => {
  const dir = t.testdir();
  // 513 bytes: a file that does not end on a tar block.
  const disk = Buffer.alloc(513, 7);
  writeFileSync(join(dir, 'disk.qcow2'), disk);
  writeFileSync(join(dir, 'vmlinux'), 'kernel');
  writeFileSync(join(dir, 'initrd'), '');
  const images = [
    { name: 'localhost/test/disk:v1', files: [{ path: 'disk/disk.img', source: join(dir, 'disk.qcow2') }] },
    {
      name: 'localhost/test/kernel:v1',
      files: [
        { path: 'boot/vmlinuz', source: join(dir, 'vmlinux') },
        { path: 'boot/initrd.img', source: join(dir, 'initrd') },
      ],
    },
  ];
  await writeLayout(join(dir, 'a'), images);
  await writeLayout(join(dir, 'b'), images);
  t.equal(
    readFileSync(join(dir, 'a', 'index.json'), 'utf8'),
    readFileSync(join(dir, 'b', 'index.json'), 'utf8'),
    'the same files make the same digests',
  );
  const index = JSON.parse(readFileSync(join(dir, 'a', 'index.json'), 'utf8')) as { manifests: Array<{ digest: string }> };
  const manifest = JSON.parse(readFileSync(join(dir, 'a', 'blobs', 'sha256', index.manifests[1]!.digest.slice(7)), 'utf8')) as {
    layers: Array<{ digest: string }>;
  };
  // GNU tar as an independent reader of the layer.
  const listing = execFileSync('tar', ['-tvf', join(dir, 'a', 'blobs', 'sha256', manifest.layers[0]!.digest.slice(7)), '--numeric-owner'], {
    encoding: 'utf8',
  });
  t.match(
    listing,
    /^drwxr-xr-x 107\/107 +0 .* boot\/\n-rw-r--r-- 107\/107 +6 .* boot\/vmlinuz\n-rw-r--r-- 107\/107 +0 .* boot\/initrd.img\n$/,
  );

  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  t.same(
    (await importLayout(join(dir, 'a'), store, { maxImageBytes: MAX })).map((r) => r.reference),
    ['localhost/test/disk:v1', 'localhost/test/kernel:v1'],
  );
  const service = new ImageService({ store, ...LOOPBACK_PULLS, maxParallelPulls: 1, maxImageBytes: MAX, log: pino({ level: 'silent' }) });
  t.teardown(() => service.close());
  const [diskPath] = await service.files(
    await service.ensure({ image: 'localhost/test/disk:v1', policy: 'Never' }),
    [{ onlyIn: '/disk' }],
    {
      disk: true,
    },
  );
  const kernelFiles = await service.files(
    await service.ensure({ image: 'localhost/test/kernel:v1', policy: 'Never' }),
    [{ path: '/boot/vmlinuz' }, { path: '/boot/initrd.img' }],
    { disk: false },
  );
  t.same(
    [readFileSync(diskPath!), ...kernelFiles.map((f) => readFileSync(f, 'utf8'))],
    [disk, 'kernel', ''],
    'the disk, the kernel and the (empty) initrd as written',
  );
});

t.test('a name longer than ustar holds is refused, naming it', async (t) => {
  const dir = t.testdir({ f: 'x' });
  await t.rejects(
    writeLayout(join(dir, 'l'), [{ name: 'localhost/x:v1', files: [{ path: `${'d/'.repeat(60)}f`, source: join(dir, 'f') }] }]),
    {
      message: /longer than a ustar name/,
    },
  );
});

t.test('a file larger than a ustar size field holds (8 GiB) is refused, naming it, before a byte is read', async (t) => {
  const dir = t.testdir({ 'big.img': '' });
  const big = join(dir, 'big.img');
  // Sparse: takes no space.
  await truncate(big, 8 * 2 ** 30);
  await t.rejects(writeLayout(join(dir, 'l'), [{ name: 'localhost/x:v1', files: [{ path: 'disk/disk.img', source: big }] }]), {
    message: /disk\/disk\.img is 8589934592 bytes, more than a ustar size field holds/,
  });
});

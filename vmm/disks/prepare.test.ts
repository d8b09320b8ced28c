// Disk preparation against real qemu-img, genisoimage and files in t.testdir().
import { DEFAULT_DOWNLOAD_POLICY } from './download-policy.js';
import t, { type Test } from 'tap';
import { lstat, mkdir, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { prepareDisks, removePreparedDisks, type DiskDirs } from './prepare.js';
import { readImageInfo } from './qemu-img.js';
import { run } from '../exec.js';
import { recordingLog } from '../testing/log.js';
import { rejection } from '../testing/rejection.js';
import { TEST_QEMU_OWNER, testSpec } from '../testing/specs.js';
import type { DiskSpec } from '../spec.js';

const MiB = 1024 * 1024;
const { log } = recordingLog();

async function setup(t: Test): Promise<{ root: string; dirs: DiskDirs; images: string }> {
  const root = t.testdir({ images: {}, host: { 'data.img': Buffer.alloc(MiB) } });
  const images = join(root, 'images');
  await run('qemu-img', ['create', '-f', 'raw', join(images, 'base.raw'), '8M']);
  await run('qemu-img', ['create', '-f', 'qcow2', join(images, 'base.qcow2'), '16M']);
  return {
    root,
    images,
    dirs: { vmDir: join(root, 'vms', 'vm1'), cacheDir: join(root, 'cache'), downloads: DEFAULT_DOWNLOAD_POLICY, owner: TEST_QEMU_OWNER },
  };
}

const disk = (name: string, source: DiskSpec['source'], over: Partial<DiskSpec> = {}): DiskSpec => ({
  name,
  device: 'disk',
  bus: 'virtio',
  source,
  ...over,
});

t.test(
  'overlays on raw and qcow2 bases, a sparse empty disk, a host path in place and a seed ISO; each with the modes its file system allows',
  async (t) => {
    const { root, images, dirs } = await setup(t);
    const spec = testSpec({
      disks: [
        disk('a', { kind: 'image', path: join(images, 'base.raw') }),
        disk('b', { kind: 'image', path: join(images, 'base.qcow2') }),
        disk('scratch', { kind: 'empty', sizeMiB: 1024 }),
        disk('data', { kind: 'host', path: join(root, 'host', 'data.img') }),
        disk('seed', { kind: 'cloudInit', userData: '#cloud-config\n', metaData: 'instance-id: vm1\n' }, { device: 'cdrom', bus: 'sata' }),
      ],
    });
    const prepared = await prepareDisks(spec, dirs, log);
    t.same(prepared, {
      // Sparse overlays and empty disks: cache none, QEMU's default AIO; fully written files: native AIO too.
      a: { path: join(dirs.vmDir, 'a.qcow2'), format: 'qcow2', modes: { cache: 'none' } },
      b: { path: join(dirs.vmDir, 'b.qcow2'), format: 'qcow2', modes: { cache: 'none' } },
      scratch: { path: join(dirs.vmDir, 'scratch.qcow2'), format: 'qcow2', modes: { cache: 'none' } },
      data: { path: join(root, 'host', 'data.img'), format: 'raw', block: false, modes: { cache: 'none', io: 'native' } },
      seed: { path: join(dirs.vmDir, 'seed.iso'), format: 'raw', modes: { cache: 'none', io: 'native' } },
    });
    const scratch = await stat(prepared.scratch!.path);
    t.match(
      {
        a: await readImageInfo(prepared.a!.path),
        b: await readImageInfo(prepared.b!.path),
        scratch: await readImageInfo(prepared.scratch!.path),
        scratchAllocatedBelow1MiB: scratch.blocks * 512 < MiB,
        vmDir: (await readdir(dirs.vmDir)).sort(),
      },
      {
        a: { format: 'qcow2', virtualSizeBytes: 8 * MiB, backingFile: join(images, 'base.raw') },
        b: { format: 'qcow2', virtualSizeBytes: 16 * MiB, backingFile: join(images, 'base.qcow2') },
        scratch: { format: 'qcow2', virtualSizeBytes: 1024 * MiB, backingFile: undefined },
        scratchAllocatedBelow1MiB: true,
        vmDir: ['a.qcow2', 'b.qcow2', 'scratch.qcow2', 'seed.iso'],
      },
    );
    const backingFormat = JSON.parse(await run('qemu-img', ['info', '--output=json', prepared.a!.path]))['backing-filename-format'];
    t.equal(backingFormat, 'raw', 'the overlay records the base format, so QEMU never probes it');
    const owner = async (p: string) => {
      const s = await stat(p);
      return { uid: s.uid, gid: s.gid, mode: (s.mode & 0o777).toString(8) };
    };
    const qemu = { uid: TEST_QEMU_OWNER.uid, gid: TEST_QEMU_OWNER.gid };
    t.same(
      {
        vmDir: await owner(dirs.vmDir),
        files: await Promise.all(Object.values(prepared).map((p) => owner(p.path))),
        base: await owner(join(images, 'base.raw')),
      },
      {
        vmDir: { ...qemu, mode: '700' },
        files: Object.values(prepared).map(() => ({ ...qemu, mode: '600' })),
        base: { uid: 0, gid: 0, mode: '644' },
      },
      "what QEMU opens read-write is its uid's alone, 0600 in a 0700 directory; the base image under an overlay stays root's",
    );
  },
);

t.test('preparing again reuses overlays and empty disks, which hold guest data', async (t) => {
  const { images, dirs } = await setup(t);
  const spec = testSpec({
    disks: [disk('a', { kind: 'image', path: join(images, 'base.qcow2') }), disk('scratch', { kind: 'empty', sizeMiB: 64 })],
  });
  const first = await prepareDisks(spec, dirs, log);
  // Stand-in for guest writes: a marker the guest would have put into the overlay.
  await run('qemu-io', ['-f', 'qcow2', '-c', 'write -P 0x5a 0 64k', first.a!.path]);
  const before = await stat(first.scratch!.path);
  const second = await prepareDisks(spec, dirs, log);
  t.same(second, first);
  t.match(
    await run('qemu-io', ['-f', 'qcow2', '-c', 'read -P 0x5a 0 64k', second.a!.path]),
    /read 65536\/65536 bytes/,
    'guest data survives',
  );
  t.equal((await stat(second.scratch!.path)).mtimeMs, before.mtimeMs, 'the empty disk was not recreated');
});

t.test("links QEMU's uid planted in the VM directory are never followed: root's files keep owner, mode and bytes", async (t) => {
  const { root, images, dirs } = await setup(t);
  const spec = testSpec({
    disks: [
      disk('a', { kind: 'image', path: join(images, 'base.qcow2') }),
      disk('seed', { kind: 'cloudInit', userData: '#cloud-config\n', metaData: 'instance-id: vm1\n' }, { device: 'cdrom', bus: 'sata' }),
    ],
  });
  await prepareDisks(spec, dirs, log);
  await writeFile(join(root, 'shadow'), 'root:secret\n', { mode: 0o640 });
  const shadow = async () => {
    const s = await stat(join(root, 'shadow'));
    return { uid: s.uid, mode: s.mode, text: await readFile(join(root, 'shadow'), 'utf8') };
  };
  const before = await shadow();
  // As an escaped guest would between two starts: the seed and the overlay replaced with links to a host file.
  for (const name of ['seed.iso', 'a.qcow2']) {
    await rm(join(dirs.vmDir, name));
    await symlink(join(root, 'shadow'), join(dirs.vmDir, name));
  }
  t.match(await rejection(prepareDisks(spec, dirs, log)), {
    kind: 'UnsafePathError',
    message: `${join(dirs.vmDir, 'a.qcow2')} is not a regular file (a symlink or other file put there); refusing it`,
  });
  // A dangling link, where qemu-img would otherwise create the file it points at.
  await rm(join(dirs.vmDir, 'a.qcow2'));
  await symlink(join(root, 'made-by-qemu-img'), join(dirs.vmDir, 'a.qcow2'));
  await t.rejects(prepareDisks(spec, dirs, log), { name: 'Error', message: /is not a regular file/ });
  t.same(
    { shadow: await shadow(), madeByQemuImg: await stat(join(root, 'made-by-qemu-img')).catch(() => 'absent') },
    { shadow: before, madeByQemuImg: 'absent' },
    'the link targets are untouched and nothing was created through a link',
  );
  t.same((await readdir(join(root, 'vms'))).sort(), ['vm1'], 'no staging directory is left');
});

t.test('a link put in place of a file that is made anew is replaced, not written through', async (t) => {
  const { root, dirs } = await setup(t);
  await writeFile(join(root, 'target'), 'host file\n');
  await mkdir(dirs.vmDir, { recursive: true });
  await symlink(join(root, 'target'), join(dirs.vmDir, 'seed.iso'));
  const seedOnly = testSpec({
    disks: [
      disk('seed', { kind: 'cloudInit', userData: '#cloud-config\n', metaData: 'instance-id: vm1\n' }, { device: 'cdrom', bus: 'sata' }),
    ],
  });
  await t.rejects(prepareDisks(seedOnly, dirs, log), { message: /is not a regular file/ }, 'a planted link is refused');
  await rm(join(dirs.vmDir, 'seed.iso'));
  const prepared = await prepareDisks(seedOnly, dirs, log);
  const seed = await lstat(prepared.seed!.path);
  t.same(
    { file: seed.isFile(), uid: seed.uid, mode: seed.mode & 0o777, target: await readFile(join(root, 'target'), 'utf8') },
    { file: true, uid: dirs.owner.uid, mode: 0o600, target: 'host file\n' },
  );
});

t.test('missing images are SpecErrors naming every disk, and nothing prepared is left on disk', async (t) => {
  const { root, images, dirs } = await setup(t);
  const spec = testSpec({
    disks: [
      disk('scratch', { kind: 'empty', sizeMiB: 64 }),
      disk('a', { kind: 'image', path: join(images, 'base.qcow2') }),
      disk('gone', { kind: 'image', path: join(images, 'nope.qcow2') }),
      disk('seed', { kind: 'cloudInit', userData: '', metaData: '' }),
      disk('lv', { kind: 'host', path: '/dev/vg-missing/lv' }),
    ],
  });
  t.match(await rejection(prepareDisks(spec, dirs, log)), {
    kind: 'SpecError',
    causes: [
      { path: 'disks[2].source.path', reason: 'FieldValueNotFound', message: /nope\.qcow2 does not exist/ },
      { path: 'disks[4].source.path', reason: 'FieldValueNotFound' },
    ],
  });
  t.same((await readdir(root)).sort(), ['host', 'images'], 'the VM directory it created is gone too');
});

t.test('a failure keeps files that existed before, and the VM directory it did not create', async (t) => {
  const { images, dirs } = await setup(t);
  const good = disk('a', { kind: 'image', path: join(images, 'base.qcow2') });
  await prepareDisks(testSpec({ disks: [good] }), dirs, log);
  const spec = testSpec({
    disks: [good, disk('b', { kind: 'empty', sizeMiB: 64 }), disk('gone', { kind: 'image', path: join(images, 'nope.raw') })],
  });
  t.match(await rejection(prepareDisks(spec, dirs, log)), { kind: 'SpecError' });
  t.same(await readdir(dirs.vmDir), ['a.qcow2']);
});

t.test('an image format other than qcow2 or raw is refused', async (t) => {
  const { images, dirs } = await setup(t);
  await run('qemu-img', ['create', '-f', 'vmdk', join(images, 'base.vmdk'), '8M']);
  t.match(await rejection(prepareDisks(testSpec({ disks: [disk('a', { kind: 'image', path: join(images, 'base.vmdk') })] }), dirs, log)), {
    kind: 'SpecError',
    causes: [{ path: 'disks[0].source.path', reason: 'FieldValueNotSupported', message: /vmdk/ }],
  });
});

t.test('a qemu-img failure is a CommandError, not a SpecError', async (t) => {
  const { images, dirs } = await setup(t);
  // A qcow2 magic with version 99: probed as qcow2, then refused by qemu-img.
  await writeFile(join(images, 'broken.qcow2'), Buffer.concat([Buffer.from([0x51, 0x46, 0x49, 0xfb, 0, 0, 0, 99]), Buffer.alloc(96)]));
  t.match(
    await rejection(prepareDisks(testSpec({ disks: [disk('a', { kind: 'image', path: join(images, 'broken.qcow2') })] }), dirs, log)),
    {
      kind: 'CommandError',
      message: /qemu-img info/,
    },
  );
});

t.test('removing prepared disks deletes what the VM owns and keeps host paths and bases', async (t) => {
  const { root, images, dirs } = await setup(t);
  const spec = testSpec({
    disks: [
      disk('a', { kind: 'image', path: join(images, 'base.raw') }),
      disk('scratch', { kind: 'empty', sizeMiB: 64 }),
      disk('data', { kind: 'host', path: join(root, 'host', 'data.img') }),
      disk('seed', { kind: 'cloudInit', userData: '', metaData: '' }),
    ],
  });
  await prepareDisks(spec, dirs, log);
  await removePreparedDisks(spec, dirs);
  await removePreparedDisks(spec, dirs);
  t.same(
    { vmDir: await readdir(dirs.vmDir), images: (await readdir(images)).sort(), host: await readdir(join(root, 'host')) },
    { vmDir: [], images: ['base.qcow2', 'base.raw'], host: ['data.img'] },
  );
});

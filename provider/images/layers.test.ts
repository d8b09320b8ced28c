import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compress, tarLayer, type Compression, type LayerFile } from '../../test/helpers/oci.js';
import { extractFiles, type WantedFile } from './layers.js';
import { readTar } from './tar.js';

/** Writes each layer as a blob file (bottom first) and takes `wanted` out; returns what was found and the bytes written. */
async function take(
  t: Test,
  layers: LayerFile[][],
  wanted: WantedFile[],
  opts: { compression?: Compression; format?: 'gnu' | 'posix'; maxBytes?: number } = {},
) {
  const dir = t.testdir();
  const blobs = layers.map((files, i) => {
    const path = join(dir, `layer${i}`);
    writeFileSync(path, compress(tarLayer(files, opts.format), opts.compression ?? 'gzip'));
    return path;
  });
  const targets = wanted.map((_, i) => join(dir, `out${i}`));
  const found = await extractFiles(blobs, wanted, targets, opts.maxBytes ?? 1 << 30);
  return { found, contents: targets.map((p) => readFileSync(p, 'utf8')) };
}

const DISK = { onlyIn: '/disk' };

t.test('the one file under /disk, as quay.io/containerdisks ship it, whatever the compression and tar format', async (t) => {
  for (const compression of ['none', 'gzip', 'zstd'] as const) {
    for (const format of ['gnu', 'posix'] as const) {
      const got = await take(t, [[{ path: 'disk/disk.img', content: 'QFI disk bytes' }]], [DISK], { compression, format });
      t.same(got, { found: [{ path: '/disk/disk.img', sizeBytes: 14 }], contents: ['QFI disk bytes'] }, `${compression}, ${format}`);
    }
  }
});

t.test('layers apply bottom to top: an upper layer replaces, whiteouts and opaque directories hide', async (t) => {
  t.same(
    (await take(t, [[{ path: 'disk/disk.img', content: 'old' }], [{ path: 'disk/disk.img', content: 'new' }]], [DISK])).contents,
    ['new'],
    'the upper layer wins',
  );
  t.same(
    (
      await take(
        t,
        [[{ path: 'disk/old.img', content: 'old' }], [{ path: 'disk/.wh.old.img' }, { path: 'disk/new.img', content: 'new' }]],
        [DISK],
      )
    ).found,
    [{ path: '/disk/new.img', sizeBytes: 3 }],
    'a whited-out lower file does not count as a second disk',
  );
  t.same(
    (
      await take(
        t,
        [
          [
            { path: 'disk/a.img', content: 'a' },
            { path: 'disk/b.img', content: 'b' },
          ],
          [{ path: 'disk/.wh..wh..opq' }, { path: 'disk/c.img', content: 'c' }],
        ],
        [DISK],
      )
    ).contents,
    ['c'],
    'an opaque /disk hides everything below it',
  );
  await t.rejects(
    take(t, [[{ path: 'disk/disk.img', content: 'x' }], [{ path: '.wh.disk' }]], [DISK]),
    { message: 'the image has no file under /disk' },
    'a deleted /disk has nothing',
  );
  t.same(
    (
      await take(
        t,
        [
          [
            { path: 'boot/vmlinuz', content: 'kernel' },
            { path: 'boot/initrd', content: 'old initrd' },
          ],
          [{ path: 'boot/initrd', content: 'initrd' }],
        ],
        [{ path: '/boot/vmlinuz' }, { path: '/boot/initrd' }],
      )
    ).contents,
    ['kernel', 'initrd'],
    'several files by path, each from the topmost layer that has it',
  );
});

t.test("KubeVirt's rules refuse what is not exactly one regular file, naming what is there", async (t) => {
  await t.rejects(
    take(t, [[{ path: 'disk/a.img', content: 'a' }], [{ path: 'disk/b.img', content: 'b' }]], [DISK]),
    { message: /more than one entry under \/disk \(b\.img, a\.img\)/ },
    'two files across layers',
  );
  await t.rejects(
    take(
      t,
      [
        [
          { path: 'disk/a.img', content: 'a' },
          { path: 'disk/b.img', content: 'b' },
        ],
      ],
      [DISK],
    ),
    { message: /more than one entry under \/disk/ },
    'two files in one layer',
  );
  await t.rejects(
    take(
      t,
      [
        [
          { path: 'etc/shadow', content: 's' },
          { path: 'disk/disk.img', symlink: '/etc/shadow' },
        ],
      ],
      [DISK],
    ),
    { message: '/disk/disk.img is a symbolic link (to /etc/shadow); the disk or kernel must be a regular file in the image' },
  );
  await t.rejects(
    take(
      t,
      [
        [
          { path: 'data/real.img', content: 'r' },
          { path: 'disk/disk.img', hardlink: 'data/real.img' },
        ],
      ],
      [DISK],
    ),
    { message: /\/disk\/disk\.img is a hard link \(to \/data\/real\.img\)/ },
  );
  await t.rejects(take(t, [[{ path: 'disk/sub', dir: true }]], [DISK]), { message: /\/disk\/sub is a directory/ });
  await t.rejects(take(t, [[{ path: 'other/file', content: 'x' }]], [DISK]), { message: 'the image has no file under /disk' });
  await t.rejects(take(t, [[{ path: 'disk/disk.img', content: 'x' }]], [{ path: '/disk/other.img' }]), {
    message: 'the image has no file /disk/other.img',
  });
  await t.rejects(take(t, [[{ path: 'disk/disk.img', content: 'x'.repeat(100) }]], [DISK], { maxBytes: 10 }), {
    message: /is 100 bytes, more than the 10/,
  });
});

t.test('a path longer than ustar holds comes through (GNU long names and PAX)', async (t) => {
  const long = `disk/${'d'.repeat(120)}.img`;
  for (const format of ['gnu', 'posix'] as const) {
    t.same((await take(t, [[{ path: long, content: 'x' }]], [DISK], { format })).found, [{ path: `/${long}`, sizeBytes: 1 }], format);
  }
});

t.test('sizes above 8 GiB use base-256 in the header', async (t) => {
  // A hand-made header: regular file "big" whose size field is GNU base-256 for 2^33 + 5.
  const header = Buffer.alloc(512);
  header.write('big', 0);
  header.write('0000644\0', 100);
  header[124] = 0x80;
  header.writeUIntBE(2 ** 33 + 5, 124 + 6, 6);
  header.write('0', 156);
  header.write('ustar\0', 257);
  header.write('00', 263);
  header.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(sum.toString(8).padStart(6, '0') + '\0 ', 148);
  const entries = [];
  for await (const { entry } of readTar(
    (async function* () {
      yield header;
    })(),
  )) {
    entries.push(entry);
    break;
  }
  t.same(entries, [{ path: 'big', type: 'file', size: 2 ** 33 + 5, linkname: '' }]);
});

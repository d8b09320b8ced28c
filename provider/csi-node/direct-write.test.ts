import { execFileSync } from 'node:child_process';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { importWriteCache } from './direct-write.js';

t.test('a volume that takes O_DIRECT is written with -t none; the probe leaves no file behind', async (t) => {
  const dir = t.testdir({});
  t.same(await importWriteCache(join(dir, 'disk.img.tmp'), false), ['-t', 'none']);
  t.same(await readdir(dir), [], 'the file made for the probe is gone');
  await writeFile(join(dir, 'device'), Buffer.alloc(4096));
  t.same(await importWriteCache(join(dir, 'device'), true), ['-t', 'none'], 'an existing device or file is opened, not made');
  t.same(await readdir(dir), ['device']);
});

t.test('a path that does not open with O_DIRECT is written through the page cache, and a FIFO does not hold the import', async (t) => {
  const dir = t.testdir({});
  t.same(await importWriteCache(join(dir, 'missing', 'disk.img.tmp'), false), [], 'no directory: no O_DIRECT');
  execFileSync('mkfifo', [join(dir, 'fifo')]);
  t.same(await importWriteCache(join(dir, 'fifo'), true), [], 'a FIFO with no reader answers at once');
});

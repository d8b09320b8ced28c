import { truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { probeDiskFacts } from './direct-io.js';

t.test('probeDiskFacts: O_DIRECT on the disk and its backing file, and whether a raw file is fully allocated', async (t) => {
  const dir = t.testdir({ 'full.img': Buffer.alloc(8192, 1) });
  const sparse = join(dir, 'sparse.img');
  await writeFile(sparse, '');
  await truncate(sparse, 1 << 20);
  // A file system that refuses O_DIRECT (EINVAL) everywhere: procfs (tmpfs takes it since Linux 6.6).
  const noDirectIo = '/proc/version';
  t.same(
    [
      await probeDiskFacts({ path: join(dir, 'full.img'), format: 'raw' }),
      await probeDiskFacts({ path: sparse, format: 'raw' }),
      await probeDiskFacts({ path: join(dir, 'full.img'), format: 'qcow2' }, noDirectIo),
      await probeDiskFacts({ path: noDirectIo, format: 'raw' }),
    ],
    [
      { block: false, directIo: true, preallocated: true },
      { block: false, directIo: true, preallocated: false },
      { block: false, directIo: false, preallocated: false },
      { block: false, directIo: false, preallocated: true }, // empty: nothing to allocate
    ],
  );
});

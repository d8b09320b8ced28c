import { execFileSync } from 'node:child_process';
import { constants } from 'node:fs';
import { open, truncate, writeFile } from 'node:fs/promises';
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
      await probeDiskFacts({ path: join(dir, 'missing.img'), format: 'raw' }),
    ],
    [
      { block: false, directIo: true, preallocated: true },
      { block: false, directIo: true, preallocated: false },
      { block: false, directIo: false, preallocated: false },
      { block: false, directIo: false, preallocated: false }, // without O_DIRECT, io native is out whatever the allocation
      { block: false, directIo: false, preallocated: false },
    ],
  );
});

t.test('probeDiskFacts on a FIFO at the disk path answers at once (no O_DIRECT) instead of waiting for a writer', async (t) => {
  const fifo = join(t.testdir(), 'disk.img');
  execFileSync('mkfifo', [fifo]);
  // On failure the probe's open waits for a writer: this one, opened once a reader exists, lets the test end.
  t.teardown(async () => (await open(fifo, constants.O_WRONLY | constants.O_NONBLOCK).catch(() => undefined))?.close());
  const answer = await Promise.race([
    probeDiskFacts({ path: fifo, format: 'raw' }),
    new Promise((resolve) => setTimeout(() => resolve('still waiting after 2 s'), 2000).unref()),
  ]);
  t.same(answer, { block: false, directIo: false, preallocated: false });
});

// The NBD export of a file still landing, read by the real qemu-img: the
// convert waits for bytes rather than reading holes, fails when the source
// fails, and the export leaves nothing behind.
import { execFile } from 'node:child_process';
import { access, open, readFile, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { run } from '../exec.js';
import { GrowingFile } from './growing-file.js';
import { exportOverNbd } from './nbd-export.js';

const MIB = 2 ** 20;
const execFileP = promisify(execFile);

/** A qcow2 of 8 MiB with a pattern at 1 MiB and another at 7 MiB, and its raw twin. */
async function images(dir: string) {
  const qcow2 = join(dir, 'source.qcow2');
  await run('qemu-img', ['create', '-f', 'qcow2', qcow2, '8M']);
  await run('qemu-io', ['-c', 'write -P 0x5a 1M 64k', '-c', 'write -P 0xa5 7M 64k', qcow2]);
  return { qcow2, size: (await stat(qcow2)).size };
}

t.test('qemu-img converts a qcow2 that lands while it reads, byte for byte; the export leaves no socket', async (t) => {
  const dir = t.testdir();
  const { qcow2, size } = await images(dir);
  const fh = await open(qcow2, 'r');
  t.teardown(() => fh.close());
  const file = new GrowingFile(fh, size);
  const served = await exportOverNbd(file);
  t.teardown(() => served.close());
  // The source "lands" 64 KiB at a time while qemu-img reads: a read of what has not landed waits.
  let landed = 0;
  const feed = setInterval(() => {
    landed = Math.min(size, landed + 64 * 1024);
    file.landedUpTo(landed);
    if (landed === size) clearInterval(feed);
  }, 2);
  t.teardown(() => clearInterval(feed));
  const out = join(dir, 'out.raw');
  await run('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', served.url, out]);
  const bytes = await readFile(out);
  const socketDir = dirname(/socket=(.*)$/.exec(served.url)?.[1] ?? '');
  await served.close();
  t.same(
    {
      length: bytes.length,
      at1M: bytes.subarray(MIB, MIB + 2).toString('hex'),
      at7M: bytes.subarray(7 * MIB, 7 * MIB + 2).toString('hex'),
      zero: bytes.subarray(2 * MIB, 3 * MIB).every((b) => b === 0),
      allLanded: landed === size,
      socketDirGone: await access(socketDir).then(
        () => false,
        () => true,
      ),
    },
    { length: 8 * MIB, at1M: '5a5a', at7M: 'a5a5', zero: true, allLanded: true, socketDirGone: true },
  );
});

t.test('a source that fails under a reader fails the convert, never a disk of holes', async (t) => {
  const dir = t.testdir();
  const { qcow2, size } = await images(dir);
  const fh = await open(qcow2, 'r');
  t.teardown(() => fh.close());
  const file = new GrowingFile(fh, size);
  const served = await exportOverNbd(file);
  t.teardown(() => served.close());
  // The header and tables landed, the data at 7 MiB never will.
  file.landedUpTo(Math.floor(size / 2));
  const convert = execFileP('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', served.url, join(dir, 'out.raw')]);
  setTimeout(() => file.fail(new Error('the download failed')), 200);
  await t.rejects(convert, /error while reading|Input\/output error/);
});

t.test('GrowingFile: a read waits for its bytes, one past the end is refused, one of landed bytes succeeds after a failure', async (t) => {
  const dir = t.testdir({ f: 'abcdefgh' });
  const fh = await open(join(dir, 'f'), 'r');
  t.teardown(() => fh.close());
  const file = new GrowingFile(fh, 8);
  const head = Buffer.alloc(4);
  let done = false;
  const reading = file.read(head, 2).then(() => (done = true));
  file.landedUpTo(5);
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.equal(done, false, 'bytes 2-5 have not all landed');
  file.landedUpTo(6);
  await reading;
  t.equal(head.toString(), 'cdef');
  await t.rejects(file.read(Buffer.alloc(4), 6), RangeError);
  file.fail(new Error('gone'));
  await t.rejects(file.read(Buffer.alloc(2), 6), /gone/);
  const landed = Buffer.alloc(2);
  await file.read(landed, 0);
  t.equal(landed.toString(), 'ab', 'what landed is still read');
});

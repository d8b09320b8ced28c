import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, open, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { copyVolumeFile } from './volume-files.js';

const execFileP = promisify(execFile);
const MIB = 1024 * 1024;

t.test("a copy where the filesystem has no reflink (this host's): the same bytes, the source's holes kept, 0600, grown", async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-volume-files-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const { stdout } = await execFileP('stat', ['-f', '-c', '%T', dir]);
  t.match(stdout.trim(), /^ext[234]/, 'the test runs on ext4: no FICLONE, the byte copy');
  const source = join(dir, 'source.img');
  // 64 MiB, data in two 1 MiB runs (the second of zeros written out), holes elsewhere.
  const fh = await open(source, 'wx');
  await fh.truncate(64 * MIB);
  await fh.write(Buffer.alloc(MIB, 0x5a), 0, MIB, 8 * MIB);
  await fh.write(Buffer.alloc(MIB, 0), 0, MIB, 40 * MIB);
  await fh.close();
  const copy = join(dir, 'copy.img');
  await copyVolumeFile(source, copy, 96 * MIB);
  const s = await stat(copy);
  t.equal(s.size, 96 * MIB, 'grown to the size asked');
  t.equal(s.mode & 0o777, 0o600);
  t.ok(s.blocks * 512 <= 2 * MIB, `only the data is allocated (${s.blocks * 512} bytes of 96 MiB)`);
  const [a, b] = await Promise.all([readFile(source), readFile(copy)]);
  t.ok(b.subarray(0, 64 * MIB).equals(a), 'the same bytes');
  t.ok(b.subarray(64 * MIB).equals(Buffer.alloc(32 * MIB)), 'zeros beyond the source');
});

t.test('a copy that fails leaves nothing at either name', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-volume-files-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await t.rejects(copyVolumeFile(join(dir, 'missing.img'), join(dir, 'copy.img'), MIB));
  t.same((await execFileP('ls', ['-A', dir])).stdout, '');
});

// What the driver writes is on stable storage when the call that wrote it
// returns: a clone's data and the record that names it. Seen through the
// file system calls made, in order (a host crash itself is not simulated).
import * as fs from 'node:fs/promises';
import { mkdtemp, open, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import t from 'tap';
import type { VolumeRecord } from './records.js';

/** node:fs/promises with every fsync and rename logged, as "sync <name>" and "rename <from> <to>" (base names; "." is the directory). */
function recordingFs(dir: string): { fs: typeof fs; calls: string[] } {
  const calls: string[] = [];
  const name = (p: string): string => (p === dir ? '.' : basename(p));
  const recording: typeof fs = {
    ...fs,
    open: (async (path: string, ...rest: unknown[]) => {
      const fh = await (open as (...a: unknown[]) => Promise<fs.FileHandle>)(path, ...rest);
      const sync = fh.sync.bind(fh);
      fh.sync = async () => {
        await sync();
        calls.push(`sync ${name(path)}`);
      };
      return fh;
    }) as typeof fs.open,
    rename: async (from, to) => {
      await fs.rename(from, to);
      calls.push(`rename ${name(String(from))} ${name(String(to))}`);
    },
  };
  return { fs: recording, calls };
}

t.test('a clone is fsynced before it is renamed into place, and its directory after', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-durability-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await writeFile(join(dir, 'source.img'), Buffer.alloc(4096, 0x5a));
  const rec = recordingFs(dir);
  const { copyVolumeFile, createSparse } = await t.mockImport<typeof import('./volume-files.js')>('./volume-files.js', {
    'node:fs/promises': rec.fs,
  });
  await copyVolumeFile(join(dir, 'source.img'), join(dir, 'clone.img'), 8192);
  const partial = `clone.img.${process.pid}.partial`;
  t.same(rec.calls, [`sync ${partial}`, `rename ${partial} clone.img`, 'sync .']);
  rec.calls.length = 0;
  await createSparse(join(dir, 'empty.img'), 8192);
  t.same(
    rec.calls,
    [`sync empty.img.${process.pid}.partial`, `rename empty.img.${process.pid}.partial empty.img`, 'sync .'],
    'a new volume the same',
  );
});

t.test(
  "the driver's records: written to a new file, fsynced, renamed into place, the directory fsynced, before the change returns",
  async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'vkvm-durability-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const rec = recordingFs(dir);
    const { Store } = await t.mockImport<typeof import('./store.js')>('./store.js', { 'node:fs/promises': rec.fs });
    const store = await Store.open(dir);
    const v: VolumeRecord = { id: 'v1', name: 'pvc-1', sizeBytes: 8192, mode: 'filesystem', createdAtMs: 1, node: { phase: 'unstaged' } };
    await store.putVolume(v);
    const tmp = `state.json.${process.pid}.tmp`;
    t.same(rec.calls, [`sync ${tmp}`, `rename ${tmp} state.json`, 'sync .']);
    t.same((await Store.open(dir)).volumes.get('v1'), v, 'and read back whole');
  },
);

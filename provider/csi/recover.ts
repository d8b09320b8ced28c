// Start-up repair, before the socket opens: a crash can leave a file without
// a record (mid-create, mid-copy) or a loop device over the file of a volume
// whose stage never finished. Both go; records are the truth.
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import type { Driver } from './driver.js';
import { detachLoops } from './block-devices.js';
import { removeFile } from './volume-files.js';

/** Removes what in `dir` is not `<id>.img` of a recorded id; the paths removed. */
async function removeUnrecorded(dir: string, recorded: ReadonlyMap<string, unknown>): Promise<string[]> {
  const removed: string[] = [];
  for (const name of await readdir(dir)) {
    if (name.endsWith('.img') && recorded.has(name.slice(0, -'.img'.length))) continue;
    await removeFile(path.join(dir, name));
    removed.push(path.join(dir, name));
  }
  return removed;
}

export async function recover(d: Driver): Promise<{ removedFiles: string[] }> {
  const { store } = d;
  const removedFiles = [
    ...(await removeUnrecorded(store.volumesDir, store.volumes)),
    ...(await removeUnrecorded(store.snapshotsDir, store.snapshots)),
  ];
  // losetup --detach on a loop still in use only marks it to go when last closed: never pulled from under a user.
  for (const v of store.volumes.values()) if (v.node.phase === 'unstaged') await detachLoops(store.volumeFile(v.id));
  if (removedFiles.length) d.log.warn({ removedFiles }, 'removed files no record names (left by a crash)');
  return { removedFiles };
}

// Start-up repair, before the socket opens: a crash can leave a file without
// a record (mid-create, mid-copy) or a loop device over the file of a volume
// whose stage never finished. Both go; records are the truth.
import { readdir } from 'node:fs/promises';
import path from 'node:path';
import type { Driver } from './driver.js';
import { detachLoops } from './block-devices.js';
import { removeFile } from './volume-files.js';

export async function recover(d: Driver): Promise<{ removedFiles: string[] }> {
  const { store } = d;
  const removedFiles: string[] = [];
  const known = (dir: string, ids: Map<string, unknown>) => async () => {
    for (const name of await readdir(dir)) {
      if (ids.has(name.replace(/\.img$/, '')) && name.endsWith('.img')) continue;
      await removeFile(path.join(dir, name));
      removedFiles.push(path.join(dir, name));
    }
  };
  await known(store.volumesDir, store.volumes)();
  await known(store.snapshotsDir, store.snapshots)();
  // losetup --detach on a loop still in use only marks it to go when last closed: never pulled from under a user.
  for (const v of store.volumes.values()) if (v.node.phase === 'unstaged') await detachLoops(store.volumeFile(v.id));
  if (removedFiles.length) d.log.warn({ removedFiles }, 'removed files no record names (left by a crash)');
  return { removedFiles };
}

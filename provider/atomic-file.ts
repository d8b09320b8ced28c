// Files written whole or not at all (certificates, keys, kubeconfigs, records).
import { rename, rm, writeFile } from 'node:fs/promises';

/**
 * Write-then-rename: a reader never sees half a file. The temporary file is
 * created afresh (so it gets `mode`, not a leftover's) and removed on failure,
 * since it may hold a private key.
 */
export async function writeAtomic(path: string, data: string, mode: number): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await rm(tmp, { force: true });
  try {
    await writeFile(tmp, data, { mode, flag: 'wx' });
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

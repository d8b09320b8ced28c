// Files written whole or not at all (certificates, keys, kubeconfigs, records).
import { open, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Flushes a file's (or a directory's entries') data and metadata to stable storage. */
export async function fsyncPath(path: string): Promise<void> {
  const fh = await open(path, 'r');
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Write-then-rename: a reader never sees half a file. The temporary file is
 * created afresh (so it gets `mode`, not a leftover's) and removed on failure,
 * since it may hold a private key. `durable` also survives a host crash once
 * this resolves: the data is fsynced before the rename (else the rename can
 * reach the disk first, leaving an empty or torn file at `path`) and the
 * directory after it (else the rename itself can be lost).
 */
export async function writeAtomic(path: string, data: string, mode: number, opts: { durable?: boolean } = {}): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await rm(tmp, { force: true });
  try {
    const fh = await open(tmp, 'wx', mode);
    try {
      await fh.writeFile(data);
      if (opts.durable) await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  if (opts.durable) await fsyncPath(dirname(path));
}

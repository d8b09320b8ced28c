// The agent's scratch directory for Block imports (volume-import.ts), made
// ready before its first use.
import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';

/** Empties `dir` (made if missing), keeping the directory itself: it may be a mount point, which cannot be removed. */
export async function emptyDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  for (const name of await readdir(dir)) await rm(join(dir, name), { recursive: true, force: true });
}

// File-existence checks that tell "absent" apart from real I/O errors
// (permissions, a broken mount), which must not be mistaken for absence.
import { stat } from 'node:fs/promises';
import type { Stats } from 'node:fs';

/** stat(path), or null when nothing is there. */
export async function statIfExists(path: string): Promise<Stats | null> {
  try {
    return await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

// `tail -F` for one log file: yields what is appended to it, and carries on in
// the new file when the launcher rotates it (moves it to <file>.1, or to
// console.previous.log on a VM restart, and starts a new one). The old file is
// read to its end first, through the handle kept open on it.
import { watch, type FSWatcher } from 'node:fs';
import { open, stat, type FileHandle } from 'node:fs/promises';
import path from 'node:path';

const READ_BYTES = 64 * 1024;

export interface FollowOptions {
  /** Checks for growth this often even without a file system event (fs.watch can miss some, or be unavailable). */
  pollMs: number;
  signal: AbortSignal;
}

/**
 * Follows `file` from `position` of the already-open `handle` (which must be
 * that file) until the signal aborts. Closes every handle it holds.
 */
export async function* followFile(file: string, handle: FileHandle, position: number, options: FollowOptions): AsyncGenerator<Buffer> {
  const changes = watchDirectory(file);
  let current = handle;
  let offset = position;
  try {
    const buffer = Buffer.alloc(READ_BYTES);
    while (!options.signal.aborted) {
      const { bytesRead } = await current.read(buffer, 0, buffer.length, offset);
      if (bytesRead > 0) {
        offset += bytesRead;
        yield Buffer.from(buffer.subarray(0, bytesRead));
        continue;
      }
      const [onDisk, held] = await Promise.all([stat(file).catch(() => undefined), current.stat()]);
      if (onDisk && onDisk.ino !== held.ino) {
        // Rotated. The launcher closed the old file before moving it, so once
        // a read after noticing finds nothing more, its end has been reached.
        if ((await current.read(buffer, 0, buffer.length, offset)).bytesRead === 0) {
          const next = await open(file, 'r');
          await current.close();
          current = next;
          offset = 0;
        }
        continue;
      }
      // Truncated in place: start over.
      if (held.size < offset) {
        offset = 0;
        continue;
      }
      await changes.next(options);
    }
  } finally {
    changes.close();
    await current.close();
  }
}

interface Changes {
  /** Resolves on a change to the file's directory, after pollMs, or on abort. */
  next(options: FollowOptions): Promise<void>;
  close(): void;
}

/**
 * Watches the directory rather than the file: a watch on the file follows its
 * inode into <file>.1 and would miss the new file.
 */
function watchDirectory(file: string): Changes {
  let wake: (() => void) | undefined;
  // Set by an event that came while nobody waited, so that the next wait returns at once.
  let changed = false;
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(path.dirname(file), () => {
      changed = true;
      wake?.();
    });
    watcher.on('error', () => watcher?.close());
  } catch {
    // No watch (inotify limits, some file systems): polling alone still follows.
  }
  return {
    next: ({ pollMs, signal }) =>
      new Promise<void>((resolve) => {
        if (changed || signal.aborted) {
          changed = false;
          return resolve();
        }
        const done = () => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          wake = undefined;
          changed = false;
          resolve();
        };
        const timer = setTimeout(done, pollMs);
        signal.addEventListener('abort', done);
        wake = done;
      }),
    close: () => watcher?.close(),
  };
}

// Waiting on signals with deadlines: a file appearing (inotify), a unix
// socket accepting, a promise settling. No fixed sleeps.
import { watch } from 'node:fs';
import { access } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { TimeoutError } from './errors.js';

/** Rejects with TimeoutError when `promise` has not settled within `timeoutMs`. */
export async function withDeadline<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`${what}: no result within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once `file` exists, woken by inotify on its directory. */
export async function waitForFile(file: string, timeoutMs: number, abort?: Promise<never>): Promise<void> {
  const dir = path.dirname(file);
  const name = path.basename(file);
  let watcher: ReturnType<typeof watch> | undefined;
  const appeared = new Promise<void>((resolve, reject) => {
    // Watch before checking, so a file created in between is not missed.
    watcher = watch(dir, (_event, changed) => {
      if (changed === name) access(file).then(resolve, () => {});
    });
    watcher.on('error', reject);
    access(file).then(resolve, () => {});
  });
  try {
    await withDeadline(abort ? Promise.race([appeared, abort]) : appeared, timeoutMs, `waiting for ${file}`);
  } finally {
    watcher?.close();
  }
}

function tryConnect(socketPath: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve();
    });
    s.once('error', reject);
  });
}

/**
 * Resolves once `socketPath` accepts a connection. The file appearing is the
 * signal; a server binds before it listens, so ECONNREFUSED right after the
 * file appears is retried with a short backoff until the deadline.
 */
export async function waitForUnixSocket(socketPath: string, timeoutMs: number, abort?: Promise<never>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await waitForFile(socketPath, timeoutMs, abort);
  for (let delayMs = 5; ; delayMs = Math.min(delayMs * 2, 100)) {
    try {
      await tryConnect(socketPath);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ECONNREFUSED' || Date.now() + delayMs > deadline) throw err;
    }
    await new Promise((r) => setTimeout(r, delayMs));
  }
}

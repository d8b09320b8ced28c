// Waiting with deadlines: a unix socket accepting (tried with back-off), a
// promise settling. No fixed sleeps.
import net from 'node:net';
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

/** Resolves with the first value `done` accepts: `current` or one `subscribe` delivers later; rejects after `timeoutMs`. */
export function untilMatch<T>(
  current: T,
  subscribe: (listener: (value: T) => void) => () => void,
  done: (value: T) => boolean,
  timeoutMs: number,
  what: string,
): Promise<T> {
  let unsubscribe = (): void => {};
  const reached = new Promise<T>((resolve) => {
    if (done(current)) return resolve(current);
    unsubscribe = subscribe((value) => {
      if (done(value)) resolve(value);
    });
  });
  return withDeadline(reached, timeoutMs, what).finally(() => unsubscribe());
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
 * Resolves once `socketPath` accepts a connection, tried with a back-off from
 * 2 ms doubling to 20 ms while it is missing or refuses: a launcher's start
 * waits on libvirtd's socket, and can lose up to one step after it accepts (a
 * failed connect costs well under a millisecond). Not woken by inotify
 * on its directory: libuv keeps a process's inotify instance open for good
 * once it made one, and the kernel allows 128 per user by default, so one per
 * launcher would cap a node near a hundred VMs (and starve dnsmasq and
 * systemd of theirs).
 */
export async function waitForUnixSocket(socketPath: string, timeoutMs: number, abort?: Promise<never>): Promise<void> {
  let stopped = false;
  const poll = async (): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    for (let delayMs = 2; !stopped; delayMs = Math.min(delayMs * 2, 20)) {
      try {
        return await tryConnect(socketPath);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ECONNREFUSED' && code !== 'ENOENT') throw err;
        if (Date.now() + delayMs > deadline)
          throw new TimeoutError(`waiting for ${socketPath} to accept: no answer within ${timeoutMs} ms`);
      }
      await new Promise((r) => setTimeout(r, delayMs));
    }
  };
  const polling = poll();
  // When `abort` wins, the polling ends at its next turn; its outcome no longer matters.
  polling.catch(() => undefined);
  try {
    await (abort ? Promise.race([polling, abort]) : polling);
  } finally {
    stopped = true;
  }
}

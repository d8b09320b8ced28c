// Time as the controllers see it: injected, so unit tests step through
// back-offs and retries without waiting (test/helpers/fake-clock.ts).

export interface Clock {
  /** Unix ms. */
  now(): number;
  /** Calls `fn` once after `delayMs`; the returned function cancels it. */
  after(delayMs: number, fn: () => void): () => void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  after(delayMs, fn) {
    const timer = setTimeout(fn, delayMs);
    return () => clearTimeout(timer);
  },
};

/** Resolves after `ms` on `clock`; rejects with the signal's reason once it aborts. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const onAbort = () => {
      cancel();
      reject(signal!.reason as Error);
    };
    const cancel = clock.after(ms, () => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    });
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs `fn` every `intervalMs`, each run timed from the end of the last, so
 * runs never overlap; `fn` handles its own errors. The function returned
 * stops it, resolving once a run under way is over.
 */
export function every(clock: Clock, intervalMs: number, fn: () => Promise<void>): () => Promise<void> {
  let cancel: (() => void) | undefined;
  let running: Promise<void> | undefined;
  let stopped = false;
  const schedule = () => {
    cancel = clock.after(intervalMs, () => {
      running = fn().finally(() => {
        running = undefined;
        if (!stopped) schedule();
      });
    });
  };
  schedule();
  return async () => {
    stopped = true;
    cancel?.();
    await running;
  };
}

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

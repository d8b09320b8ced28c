// A work queue of keys, as client-go's workqueue: a key waiting is never
// queued twice; a key added while it is being processed runs once more
// afterwards; failures are retried with capped exponential backoff plus
// jitter; keys for different objects run concurrently up to `workers`, the
// same key never does.
import { systemClock, type Clock } from '../clock.js';
import type { Logger } from '../log.js';

export type Handler = (key: string) => Promise<void>;

export interface QueueOptions {
  name: string;
  workers: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
  log: Logger;
  random?: () => number;
  /** Timers of addAfter and retries; the system clock unless a test steps time itself. */
  clock?: Clock;
}

export class KeyQueue {
  private readonly waiting = new Set<string>();
  private readonly order: string[] = [];
  private readonly inFlight = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  /** Cancels of the delayed adds, by key. */
  private readonly timers = new Map<string, () => void>();
  private running = 0;
  private stopped = false;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly handler: Handler,
    private readonly opts: QueueOptions,
  ) {}

  add(key: string): void {
    if (this.stopped) return;
    if (this.inFlight.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.waiting.has(key)) return;
    this.waiting.add(key);
    this.order.push(key);
    this.pump();
  }

  /** Adds after a delay (e.g. a grace period); an earlier add() still runs it sooner. */
  addAfter(key: string, delayMs: number): void {
    if (this.stopped) return;
    this.timers.get(key)?.();
    this.timers.set(
      key,
      (this.opts.clock ?? systemClock).after(delayMs, () => {
        this.timers.delete(key);
        this.add(key);
      }),
    );
  }

  /** Backoff for a key's next retry, for callers that report it (e.g. CrashLoopBackOff). */
  retryDelayMs(key: string): number {
    const n = this.failures.get(key) ?? 0;
    const base = this.opts.baseDelayMs ?? 500;
    const capped = Math.min(base * 2 ** n, this.opts.maxDelayMs ?? 60_000);
    return capped * (0.8 + 0.4 * (this.opts.random ?? Math.random)());
  }

  /** Runs the key again after its backoff, which grows with each failure until a sync succeeds. */
  retryLater(key: string, err: unknown): void {
    const delay = this.retryDelayMs(key);
    this.failures.set(key, (this.failures.get(key) ?? 0) + 1);
    this.opts.log.warn({ err, key, queue: this.opts.name, retryInMs: Math.round(delay) }, 'sync failed; will retry');
    this.addAfter(key, delay);
  }

  forget(key: string): void {
    this.failures.delete(key);
  }

  stop(): void {
    this.stopped = true;
    for (const cancel of this.timers.values()) cancel();
    this.timers.clear();
  }

  /** Nothing is queued or running (delayed adds aside). */
  isIdle(): boolean {
    return this.running === 0 && this.order.length === 0;
  }

  /** Resolves when nothing is queued or running (tests, shutdown). */
  idle(): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private pump(): void {
    while (!this.stopped && this.running < this.opts.workers && this.order.length > 0) {
      const key = this.order.shift()!;
      this.waiting.delete(key);
      this.inFlight.add(key);
      this.running++;
      void this.process(key);
    }
    if (this.isIdle()) {
      for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  private async process(key: string): Promise<void> {
    try {
      await this.handler(key);
      this.failures.delete(key);
    } catch (err) {
      this.retryLater(key, err);
    } finally {
      this.inFlight.delete(key);
      this.running--;
      if (this.dirty.delete(key)) this.add(key);
      this.pump();
    }
  }
}

// Ends console sessions nobody uses, as the kubelet's
// --streaming-connection-idle-timeout does. Traffic is what a session
// carries: the client's input (stdin, terminal resizes) and the guest's
// output. Keep-alives are not: kube-apiserver pings its SPDY connection to the
// node every 5 s, so counting them, as the kubelet's spdystream does, would
// keep every session it proxies open for ever.
import type { Readable } from 'node:stream';
import { formatDuration } from '../../duration.js';

/** The kubelet's default. */
export const DEFAULT_IDLE_TIMEOUT_MS = 4 * 3_600_000;

export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** A session ended for want of traffic. */
export class SessionIdleError extends Error {
  readonly kind = 'SessionIdle';
}

/**
 * Aborts `signal` with a SessionIdleError once no traffic has passed for
 * `timeoutMs`. Traffic only notes the time; the one timer is re-armed when it
 * fires early, not on every chunk.
 */
export class IdleTimer {
  private readonly controller = new AbortController();
  readonly signal = this.controller.signal;
  private lastTraffic: number;
  private timer: unknown;

  constructor(
    private readonly timeoutMs: number,
    private readonly clock: Clock = systemClock,
  ) {
    this.lastTraffic = clock.now();
    this.arm(timeoutMs);
  }

  /**
   * Counts the chunks read from `streams` as traffic. Call once the session
   * reads them: a 'data' listener attached first would start the flow before
   * the session is there to receive it.
   */
  watch(streams: (Readable | undefined)[]): void {
    for (const stream of streams) stream?.on('data', this.traffic);
  }

  private readonly traffic = (): void => {
    this.lastTraffic = this.clock.now();
  };

  stop(): void {
    this.clock.clearTimeout(this.timer);
  }

  private arm(ms: number): void {
    this.timer = this.clock.setTimeout(() => this.check(), ms);
  }

  private check(): void {
    const idleMs = this.clock.now() - this.lastTraffic;
    if (idleMs < this.timeoutMs) return this.arm(this.timeoutMs - idleMs);
    this.controller.abort(
      new SessionIdleError(`session closed after ${formatDuration(this.timeoutMs)} without traffic (--streaming-connection-idle-timeout)`),
    );
  }
}

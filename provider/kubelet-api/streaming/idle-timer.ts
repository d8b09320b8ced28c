// Ends console sessions nobody uses, as the kubelet's
// --streaming-connection-idle-timeout does. Traffic is what a session
// carries: the client's input (stdin, terminal resizes) and the guest's
// output. Keep-alives are not: kube-apiserver pings its SPDY connection to the
// node every 5 s, so counting them, as the kubelet's spdystream does, would
// keep every session it proxies open for ever.
import type { EventEmitter } from 'node:events';
import type { WebSocket } from 'ws';
import { formatDuration } from '../../duration.js';
import type { Logger } from '../../log.js';

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
   * Counts each `event` of `sources` (a stream's chunks; a WebSocket's or a
   * UDP socket's messages) as traffic. Watch a stream once the session reads
   * it: a 'data' listener attached first would start the flow before the
   * session is there to receive it.
   */
  watch(sources: (EventEmitter | undefined)[], event: 'data' | 'message' = 'data'): void {
    for (const source of sources) source?.on(event, this.traffic);
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

/**
 * An IdleTimer for a WebSocket session that already counts the client's
 * messages: once it fires, the client is closed normally with the reason (the
 * message the pod paths put in their Status). Watch the other side once the
 * session reads it, and stop the timer when the session ends.
 */
export function closeWhenIdle(ws: WebSocket, timeoutMs: number, log: Pick<Logger, 'info'>): IdleTimer {
  const idle = new IdleTimer(timeoutMs);
  idle.signal.addEventListener('abort', () => {
    const reason = (idle.signal.reason as Error).message;
    log.info({ reason }, 'session closed');
    ws.close(1000, reason);
  });
  idle.watch([ws], 'message');
  return idle;
}

// What an exec/attach session sees of its client once the upgrade is done,
// whichever transport (SPDY streams or WebSocket channels) carries it.
import type { Readable, Writable } from 'node:stream';
import type { Logger } from '../../log.js';
import type { Status } from './status.js';

/** The streams the client asked for (query input/output/error/tty). */
export interface StreamOptions {
  stdin: boolean;
  stdout: boolean;
  /** Never with tty: a terminal has one output. */
  stderr: boolean;
  tty: boolean;
}

export interface StreamingConnection {
  /** Client input; ends when the client closes stdin. */
  readonly stdin?: Readable;
  readonly stdout?: Writable;
  readonly stderr?: Writable;
  /**
   * Terminal size changes (JSON {"Width","Height"} objects). A serial console
   * has no window size to set, so sessions only drain it.
   */
  readonly resize?: Readable;
  /**
   * Ends the session: closes the input streams, flushes and closes the
   * outputs, sends `status` on the error stream and closes the connection
   * gracefully, leaving the last word to the client so that output still in
   * flight is not cut off. Resolves once the status is written.
   */
  finish(status: Status): Promise<void>;
  /** Resolves when the connection has closed, whoever closed it. */
  readonly closed: Promise<void>;
}

/** Sessions log through the request's logger. */
export type SessionLogger = Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>;

/** The client upgraded but never completed its side of the session setup. */
export class StreamSetupError extends Error {
  readonly kind = 'StreamSetup';
}

/** Resolves once `stream` has flushed and ended its writable side, or can no longer. */
export function endWritable(stream: Writable): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed) return resolve();
    stream.once('close', () => resolve());
    stream.once('error', () => resolve());
    stream.end(() => resolve());
  });
}

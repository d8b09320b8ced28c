// The part of spdy-transport 3 (which ships no types) that the streaming code
// and its tests use.
declare module 'spdy-transport' {
  import type { EventEmitter } from 'node:events';
  import type { Duplex } from 'node:stream';

  namespace transport {
    interface SpdyStream extends Duplex {
      readonly id: number;
      /** Header names are lower case, as SPDY/3 sends them. */
      readonly headers: Record<string, string | undefined>;
      /** Sends SYN_REPLY (on a stream the peer opened). */
      respond(status: number, headers: Record<string, string>, callback?: (err?: Error) => void): void;
      /** Sends RST_STREAM. */
      abort(code?: string, callback?: () => void): void;
    }

    interface RequestOptions {
      method: string;
      path: string;
      host?: string;
      headers?: Record<string, string>;
    }

    interface SpdyConnection extends EventEmitter {
      /** Fixes the protocol version instead of learning it from the peer's first frame. */
      start(version: number): void;
      /** Opens a stream (SYN_STREAM); `callback` runs once the frame is queued. */
      request(options: RequestOptions, callback?: (err: Error | null, stream: SpdyStream) => void): SpdyStream;
      /** Sends GOAWAY, then closes the socket once every stream has closed. */
      end(callback?: () => void): void;
      on(event: 'stream', listener: (stream: SpdyStream) => void): this;
      on(event: 'error', listener: (err: Error) => void): this;
      on(event: 'close', listener: (err?: Error) => void): this;
    }

    interface ConnectionOptions {
      protocol: 'spdy' | 'http2';
      isServer: boolean;
      /** Receive window advertised to the peer, in bytes. */
      windowSize?: number;
    }
  }

  const transport: {
    connection: { create(socket: Duplex, options: transport.ConnectionOptions): transport.SpdyConnection };
  };
  export = transport;
}

// A SPDY/3.1 connection as client-go (moby/spdystream) speaks it, on an
// upgraded kubelet API request: the 101 answer, then spdy-transport doing the
// framing, adjusted where spdystream departs from SPDY as spdy-transport reads
// it. exec/attach (spdy.ts) and port-forward (port-forward-spdy.ts) build on it.
import type { Socket } from 'node:net';
import transport from 'spdy-transport';
import type { Upgrade } from '../upgrade.js';
import type { SessionLogger } from './connection.js';
import { PROTOCOL_HEADER } from './negotiate.js';

export type SpdyStream = transport.SpdyStream;

export interface SpdyConnection {
  socket: Socket;
  conn: transport.SpdyConnection;
  /** Resolves when the socket has closed, whoever closed it. */
  closed: Promise<void>;
}

/** Answers the upgrade with `protocol` and starts SPDY on the socket. */
export function upgradeToSpdy(upgrade: Upgrade, protocol: string, log: SessionLogger): SpdyConnection {
  const socket = upgrade.socket as Socket;
  socket.setNoDelay(true);
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n${PROTOCOL_HEADER}: ${protocol}\r\n\r\n`);
  if (upgrade.head.length > 0) socket.unshift(upgrade.head);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  const conn = transport.connection.create(socket, { protocol: 'spdy', isServer: true });
  acceptBareSynStreams(conn);
  conn.on('error', (err) => {
    log.debug({ err }, 'SPDY connection failed');
    socket.destroy();
  });
  return { socket, conn, closed };
}

type ParseKVs = (buffer: unknown, callback: (err: Error | null, headers?: Record<string, string>) => void) => void;

/**
 * spdystream uses SPDY/3 as bare stream multiplexing: its SYN_STREAM frames
 * carry its own headers (streamtype, port, …) and nothing else, while
 * spdy-transport's parser rejects a SYN_STREAM without the HTTP
 * pseudo-headers :method and :path. Supply them while the header block is
 * decoded, before the parser checks.
 */
function acceptBareSynStreams(conn: transport.SpdyConnection): void {
  const parser = (conn as unknown as { _spdyState: { parser: { parseKVs: ParseKVs } } })._spdyState.parser;
  const parseKVs = parser.parseKVs.bind(parser);
  parser.parseKVs = (buffer, callback) =>
    parseKVs(buffer, (err, headers) => callback(err, headers && { ':method': 'POST', ':path': '/', ...headers }));
}

interface SendWindow {
  current: number;
  max: number;
  update(delta: number): void;
  on(event: 'drain', listener: () => void): void;
}

/**
 * spdystream has no flow control: it never sends WINDOW_UPDATE and ignores
 * ours, relying on TCP backpressure (so does the kubelet's server). spdy-transport
 * honours the peer's window and would stall each stream after its first 64 KiB
 * of output. Refill the send window whenever it runs low.
 */
export function ignorePeerWindow(stream: SpdyStream): void {
  const send = (stream as unknown as { _spdyState: { window: { send: SendWindow } } })._spdyState.window.send;
  send.on('drain', () => send.update(send.max - send.current));
}

interface Pausable {
  pause(): void;
  resume(): void;
}

/**
 * The receiving half of spdystream's backpressure. spdy-transport pushes
 * every DATA frame into its stream whether or not anyone reads it, and
 * spdystream's peer ignores windows, so a client sending faster than the
 * stream is read (a guest that reads slowly, or not at all) would make the
 * agent buffer without bound. spdystream's own reader blocks its connection
 * while a stream's buffer is full, which stops reading the socket and lets
 * TCP push back; this does the same: while any watched stream holds more than
 * its high-water mark unread, the frame parser is paused, and with it the
 * socket (it is piped into the parser).
 */
export class ReceiveBackpressure {
  private readonly full = new Set<SpdyStream>();
  private readonly parser: Pausable;

  constructor(conn: transport.SpdyConnection) {
    this.parser = (conn as unknown as { _spdyState: { parser: Pausable } })._spdyState.parser;
  }

  watch(stream: SpdyStream): void {
    const s = stream as unknown as { push(chunk: unknown): boolean; _read(size: number): void };
    const push = s.push.bind(stream);
    const read = s._read.bind(stream);
    s.push = (chunk) => {
      const room = push(chunk);
      if (!room && chunk !== null) this.hold(stream);
      return room;
    };
    // Readable calls _read once the reader has taken the buffer below its mark.
    s._read = (size) => {
      this.release(stream);
      read(size);
    };
    stream.once('close', () => this.release(stream));
  }

  private hold(stream: SpdyStream): void {
    if (this.full.size === 0) this.parser.pause();
    this.full.add(stream);
  }

  private release(stream: SpdyStream): void {
    if (!this.full.delete(stream)) return;
    if (this.full.size === 0) this.parser.resume();
  }
}

// The WebSocket side of exec/attach (subprotocols v5.channel.k8s.io and
// v4.channel.k8s.io, binary): every message starts with a channel byte,
// 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize. v5 adds [255, channel] from
// the client, which closes that input channel (stdin EOF), as
// k8s.io/apimachinery wsstream does.
import type { IncomingMessage } from 'node:http';
import { Readable, Writable } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import type { Upgrade } from '../upgrade.js';
import { endWritable, StreamSetupError, type SessionLogger, type StreamingConnection, type StreamOptions } from './connection.js';
import { negotiate, protocolTraits, WEBSOCKET_PROTOCOLS, type ProtocolTraits, type StreamProtocol } from './negotiate.js';
import { encodeStatus, type Status } from './status.js';

const STDIN = 0;
const STDOUT = 1;
const STDERR = 2;
const ERROR = 3;
const RESIZE = 4;
const CLOSE = 255;

/**
 * The largest message a client may send. ws holds a whole message in memory
 * before handing it over, and its default (100 MiB) would let each session
 * make the agent hold that much. Clients send keystrokes, pasted text and
 * resize events: client-go writes stdin in io.Copy's 32 KiB reads, one
 * message each, so 1 MiB leaves ample room. A larger message closes the
 * connection (1009).
 */
export const MAX_MESSAGE_BYTES = 1024 * 1024;

/** One per route group; its routes hand it their upgrades. `protocols`: what it answers to, best first. */
export function webSocketServer(protocols: readonly string[] = WEBSOCKET_PROTOCOLS): WebSocketServer {
  return new WebSocketServer({
    noServer: true,
    maxPayload: MAX_MESSAGE_BYTES,
    handleProtocols: (offered) => negotiate([...offered], protocols) ?? false,
  });
}

export async function acceptWebSocket(
  wss: WebSocketServer,
  req: IncomingMessage,
  upgrade: Upgrade,
  want: StreamOptions,
  log: SessionLogger,
): Promise<StreamingConnection> {
  return new WebSocketChannels(await upgradeToWebSocket(wss, req, upgrade), want, log);
}

/** Completes the WebSocket handshake on an upgrade request's socket. */
export function upgradeToWebSocket(wss: WebSocketServer, req: IncomingMessage, upgrade: Upgrade): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    // ws answers a bad handshake itself and closes the socket without calling back.
    const onClose = () => reject(new StreamSetupError('WebSocket handshake failed'));
    upgrade.socket.once('close', onClose);
    wss.handleUpgrade(req, upgrade.socket, upgrade.head, (ws) => {
      upgrade.socket.off('close', onClose);
      resolve(ws);
    });
  });
}

class WebSocketChannels implements StreamingConnection {
  readonly stdin?: Readable;
  readonly stdout?: Writable;
  readonly stderr?: Writable;
  readonly resize?: Readable;
  readonly closed: Promise<void>;
  private readonly traits: ProtocolTraits;
  private readonly endedInputs = new WeakSet<Readable>();
  private finishing?: Promise<void>;

  constructor(
    private readonly ws: WebSocket,
    want: StreamOptions,
    log: SessionLogger,
  ) {
    this.traits = protocolTraits(ws.protocol as StreamProtocol);
    this.stdin = want.stdin ? this.input() : undefined;
    this.resize = want.tty ? this.input() : undefined;
    this.stdout = want.stdout ? this.output(STDOUT, log) : undefined;
    this.stderr = want.stderr ? this.output(STDERR, log) : undefined;
    this.closed = new Promise((resolve) => ws.once('close', () => resolve()));
    // Input that never reached its end is torn down with the connection.
    void this.closed.then(() => {
      this.stdin?.destroy();
      this.resize?.destroy();
    });
    ws.on('error', (err) => log.debug({ err }, 'WebSocket connection failed'));
    ws.on('message', (data: Buffer) => this.demux(data));
    // An empty message on the lowest writable channel tells the client the session is up.
    ws.send(Buffer.of(want.stdout ? STDOUT : want.stderr ? STDERR : ERROR));
  }

  finish(status: Status): Promise<void> {
    // A client that is gone cannot be told; stop trying once the connection has closed.
    this.finishing ??= Promise.race([this.writeFinish(status), this.closed]);
    return this.finishing;
  }

  private async writeFinish(status: Status): Promise<void> {
    // Close the input channels: what the client still sends is dropped, not queued.
    for (const r of [this.stdin, this.resize]) if (r) this.deliver(r, null);
    await Promise.all([this.stdout, this.stderr].map((w) => w && endWritable(w)));
    await new Promise<void>((resolve) =>
      this.ws.send(Buffer.concat([Buffer.of(ERROR), encodeStatus(status, this.traits)]), () => resolve()),
    );
    // The close frame; ws closes the socket when the client answers it, after
    // reading everything before it.
    this.ws.close(1000);
  }

  private input(): Readable {
    return new Readable({ read: () => this.ws.resume() });
  }

  private output(channel: number, log: SessionLogger): Writable {
    const w = new Writable({
      write: (chunk: Buffer, _encoding, callback) =>
        this.ws.send(Buffer.concat([Buffer.of(channel), chunk]), (err) => callback(err ?? null)),
    });
    w.on('error', (err) => log.debug({ err, channel }, 'WebSocket channel write failed'));
    return w;
  }

  private demux(data: Buffer): void {
    const channel = data[0];
    if (channel === CLOSE && this.traits.closeSignal) {
      const target = this.inputFor(data[1]);
      if (target) this.deliver(target, null);
      return;
    }
    const target = this.inputFor(channel);
    // Backpressure: stop reading the socket until the session reads on.
    if (target && !this.deliver(target, data.subarray(1))) this.ws.pause();
  }

  private inputFor(channel: number | undefined): Readable | undefined {
    return channel === STDIN ? this.stdin : channel === RESIZE ? this.resize : undefined;
  }

  /** Pushes into an input channel unless it has ended; false when its buffer is full. */
  private deliver(target: Readable, data: Buffer | null): boolean {
    if (this.endedInputs.has(target)) return true;
    if (data === null) this.endedInputs.add(target);
    return target.push(data);
  }
}

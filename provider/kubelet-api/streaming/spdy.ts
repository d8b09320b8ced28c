// The SPDY/3.1 side of exec/attach, as kube-apiserver (and any client-go
// client) speaks it to a kubelet: after "101 Switching Protocols" the client
// opens one SPDY stream per channel, named by its streamtype header, and waits
// for each stream's SYN_REPLY before opening the next; the session starts
// once every expected stream is there (kubelet cri/streaming/remotecommand
// httpstream.go). spdy-connection.ts does the framing.
import type { Socket } from 'node:net';
import type transport from 'spdy-transport';
import type { Upgrade } from '../upgrade.js';
import { endWritable, StreamSetupError, type SessionLogger, type StreamingConnection, type StreamOptions } from './connection.js';
import { protocolTraits, type ProtocolTraits, type StreamProtocol } from './negotiate.js';
import { ignorePeerWindow, upgradeToSpdy, type SpdyStream } from './spdy-connection.js';
import { encodeStatus, type Status } from './status.js';

type StreamType = 'error' | 'stdin' | 'stdout' | 'stderr' | 'resize';

/** How long the client has to open its streams (the kubelet's DefaultStreamCreationTimeout). */
const STREAM_CREATION_TIMEOUT_MS = 30_000;
/**
 * How long a finished session waits for the client to close the connection.
 * Output still buffered towards a slow client is delivered meanwhile; only a
 * client that neither reads nor closes is cut off (kube-apiserver's
 * stream translator waits as long).
 */
const FINISH_TIMEOUT_MS = 15 * 60_000;

export async function acceptSpdy(
  upgrade: Upgrade,
  protocol: StreamProtocol,
  want: StreamOptions,
  log: SessionLogger,
): Promise<StreamingConnection> {
  const { socket, conn, closed } = upgradeToSpdy(upgrade, protocol, log);
  const traits = protocolTraits(protocol);
  const streams = await receiveStreams(conn, expectedStreams(want, traits), closed, log).catch((err: unknown) => {
    socket.destroy();
    throw err;
  });
  return new SpdyStreams(socket, conn, streams, traits, closed);
}

/** The error stream always; then what the query asked for; resize for a TTY from v3 on. */
function expectedStreams(want: StreamOptions, traits: ProtocolTraits): StreamType[] {
  const types: StreamType[] = ['error'];
  if (want.stdin) types.push('stdin');
  if (want.stdout) types.push('stdout');
  if (want.stderr) types.push('stderr');
  if (want.tty && traits.resize) types.push('resize');
  return types;
}

function receiveStreams(
  conn: transport.SpdyConnection,
  expected: StreamType[],
  closed: Promise<void>,
  log: SessionLogger,
): Promise<Map<StreamType, SpdyStream>> {
  return new Promise((resolve, reject) => {
    const received = new Map<StreamType, SpdyStream>();
    const timer = setTimeout(
      () => reject(new StreamSetupError('timed out waiting for the client to create its streams')),
      STREAM_CREATION_TIMEOUT_MS,
    );
    void closed.then(() => {
      clearTimeout(timer);
      reject(new StreamSetupError('the client closed the connection while creating its streams'));
    });
    const onStream = (stream: SpdyStream): void => {
      const type = stream.headers.streamtype;
      stream.on('error', (err) => log.debug({ err, streamType: type }, 'SPDY stream failed'));
      ignorePeerWindow(stream);
      // The client waits for this reply before it opens its next stream.
      stream.respond(200, {});
      if (!expected.includes(type as StreamType)) {
        log.warn({ streamType: type }, 'unexpected SPDY stream type; resetting it');
        stream.abort();
        return;
      }
      received.set(type as StreamType, stream);
      if (expected.every((t) => received.has(t))) {
        clearTimeout(timer);
        // Streams opened from now on are reset: spdy-transport aborts a stream nobody listens for.
        conn.off('stream', onStream);
        resolve(received);
      }
    };
    conn.on('stream', onStream);
  });
}

class SpdyStreams implements StreamingConnection {
  readonly stdin?: SpdyStream;
  readonly stdout?: SpdyStream;
  readonly stderr?: SpdyStream;
  readonly resize?: SpdyStream;
  private readonly error: SpdyStream;
  private finishing?: Promise<void>;

  constructor(
    private readonly socket: Socket,
    private readonly conn: transport.SpdyConnection,
    streams: Map<StreamType, SpdyStream>,
    private readonly traits: ProtocolTraits,
    readonly closed: Promise<void>,
  ) {
    this.error = streams.get('error')!;
    this.stdin = streams.get('stdin');
    this.stdout = streams.get('stdout');
    this.stderr = streams.get('stderr');
    this.resize = streams.get('resize');
    // The client sends nothing on these, but a stream only closes (and the
    // connection only ends) once its readable side has been read to its end.
    for (const s of [this.error, this.stdout, this.stderr]) s?.resume();
  }

  finish(status: Status): Promise<void> {
    // A client that is gone cannot be told; stop trying once the connection has closed.
    this.finishing ??= Promise.race([this.writeFinish(status), this.closed]);
    return this.finishing;
  }

  private async writeFinish(status: Status): Promise<void> {
    // Our half of the input streams: client-go waits for it to release stdin.
    for (const s of [this.stdin, this.resize]) s?.end();
    await Promise.all([this.stdout, this.stderr].map((s) => s && endWritable(s)));
    const bytes = encodeStatus(status, this.traits);
    if (bytes.length > 0) this.error.write(bytes);
    await endWritable(this.error);
    // GOAWAY. spdy-transport closes the socket once every stream is closed,
    // i.e. once the client has read everything and closed or reset its side.
    this.conn.end();
    const timer = setTimeout(() => this.socket.destroy(), FINISH_TIMEOUT_MS).unref();
    void this.closed.then(() => clearTimeout(timer));
  }
}

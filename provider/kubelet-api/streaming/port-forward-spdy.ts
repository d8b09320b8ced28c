// port-forward over SPDY (portforward.k8s.io), as the kubelet serves it
// (cri/streaming/portforward/httpstream.go) and kube-apiserver relays it for
// `kubectl port-forward`: for each connection it forwards, the client opens
// two streams, error and data, both with headers `port` and `requestID`;
// once a pair is complete its data stream is joined to that port. What goes
// wrong with one pair is written as text on its error stream, and the
// session carries on; the session ends when the client closes the connection.
import type { SessionLogger } from './connection.js';
import { forwardPort, MAX_FORWARDED_CONNECTIONS, type ForwardTarget } from './port-forward.js';
import { ignorePeerWindow, ReceiveBackpressure, type SpdyConnection, type SpdyStream } from './spdy-connection.js';

/** How long a pair may wait for its second stream (the kubelet's DefaultStreamCreationTimeout). */
export const STREAM_CREATION_TIMEOUT_MS = 30_000;

type StreamType = 'error' | 'data';

interface Pair {
  requestId: string;
  error?: SpdyStream;
  data?: SpdyStream;
  timer: NodeJS.Timeout;
}

/** Why the kubelet refuses a stream (httpStreamReceived), or undefined for a valid one. */
export function invalidStream(headers: Record<string, string | undefined>): string | undefined {
  const port = headers.port;
  if (!port) return '"port" header is required';
  if (!/^\d+$/.test(port) || Number(port) > 65535) return `unable to parse "${port}" as a port`;
  if (Number(port) < 1) return `port "${port}" must be > 0`;
  const type = headers.streamtype;
  if (!type) return '"streamType" header is required';
  if (type !== 'error' && type !== 'data') return `invalid stream type "${type}"`;
  return undefined;
}

/**
 * The pair a stream belongs to. Clients older than the requestID header are
 * paired as the kubelet pairs them: by stream id, the error stream's id, and
 * the data stream's id less 2 (they open error then data).
 */
export function requestIdOf(stream: { id: number; headers: Record<string, string | undefined> }): string {
  const given = stream.headers.requestid;
  if (given) return given;
  return String(stream.headers.streamtype === 'data' ? stream.id - 2 : stream.id);
}

/** Serves stream pairs until the connection closes; resolves then. */
export function servePortForwardSpdy(spdy: SpdyConnection, target: ForwardTarget, log: SessionLogger): Promise<void> {
  const backpressure = new ReceiveBackpressure(spdy.conn);
  const pairs = new Map<string, Pair>();
  let forwarding = 0;

  const run = async (pair: Pair & { error: SpdyStream; data: SpdyStream }): Promise<void> => {
    const port = Number(pair.data.headers.port);
    let message: string | undefined;
    if (forwarding >= MAX_FORWARDED_CONNECTIONS) {
      message = `too many connections forwarded at once in this session (limit ${MAX_FORWARDED_CONNECTIONS}): close one and retry`;
      pair.data.end();
      pair.data.resume();
    } else {
      forwarding++;
      message = await forwardPort(target, port, pair.data);
      forwarding--;
    }
    if (message) {
      log.debug({ port, requestId: pair.requestId, err: message }, 'forwarded connection failed');
      pair.error.write(message);
    }
    pair.error.end();
  };

  const onStream = (stream: SpdyStream): void => {
    stream.on('error', (err) => log.debug({ err, streamType: stream.headers.streamtype }, 'SPDY stream failed'));
    const invalid = invalidStream(stream.headers);
    if (invalid) {
      log.debug({ reason: invalid }, 'port-forward stream refused');
      stream.abort();
      return;
    }
    ignorePeerWindow(stream);
    backpressure.watch(stream);
    stream.respond(200, {});
    const requestId = requestIdOf(stream);
    const type = stream.headers.streamtype as StreamType;
    let pair = pairs.get(requestId);
    if (!pair) {
      const created: Pair = {
        requestId,
        timer: setTimeout(() => {
          pairs.delete(requestId);
          created.error?.end(`(request=${requestId}) timed out waiting for streams`);
          created.data?.end();
        }, STREAM_CREATION_TIMEOUT_MS),
      };
      pair = created;
      pairs.set(requestId, pair);
    }
    if (pair[type]) {
      pair.error?.write(`error processing stream for request ${requestId}: ${type} stream already assigned`);
      stream.abort();
      return;
    }
    pair[type] = stream;
    // The client sends nothing on the error stream; read its end so that it can close.
    if (type === 'error') stream.resume();
    if (pair.error && pair.data) {
      clearTimeout(pair.timer);
      pairs.delete(requestId);
      void run(pair as Pair & { error: SpdyStream; data: SpdyStream });
    }
  };

  spdy.conn.on('stream', onStream);
  return spdy.closed.then(() => {
    for (const pair of pairs.values()) clearTimeout(pair.timer);
  });
}

// A SPDY/3.1 client for kubelet API tests, behaving as client-go's
// (moby/spdystream): an HTTP upgrade, then SYN_STREAMs carrying only their own
// headers, and neither SETTINGS nor WINDOW_UPDATE frames.
import { connect, type Socket } from 'node:net';
import transport from 'spdy-transport';

export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Reads the HTTP response head; the bytes after it go back into the socket. */
function readHead(socket: Socket): Promise<{ status: number; headers: Record<string, string> }> {
  return new Promise((resolve) => {
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end === -1) return;
      socket.off('data', onData);
      socket.pause();
      socket.unshift(buffered.subarray(end + 4));
      const [statusLine, ...lines] = buffered.subarray(0, end).toString().split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      resolve({ status: Number(statusLine!.split(' ')[1]), headers });
    };
    socket.on('data', onData);
  });
}

export type SpdyUpgrade = (HttpAnswer & { conn?: undefined }) | (HttpAnswer & { conn: transport.SpdyConnection; socket: Socket });

/** Asks for an upgrade to SPDY/3.1 offering `protocols` (with POST, as client-go); a refusal comes back with its body. */
export async function upgradeSpdy(
  port: number,
  path: string,
  opts: { token?: string; protocols: string[]; method?: 'GET' | 'POST' },
): Promise<SpdyUpgrade> {
  const socket = connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  socket.write(
    [
      `${opts.method ?? 'POST'} ${path} HTTP/1.1`,
      'Host: 127.0.0.1',
      ...(opts.token ? [`Authorization: Bearer ${opts.token}`] : []),
      'Connection: Upgrade',
      'Upgrade: SPDY/3.1',
      ...opts.protocols.map((p) => `X-Stream-Protocol-Version: ${p}`),
      'Content-Length: 0',
      '',
      '',
    ].join('\r\n'),
  );
  const { status, headers } = await readHead(socket);
  if (status !== 101) {
    let body = '';
    socket.on('data', (d: Buffer) => (body += d.toString()));
    socket.resume();
    await new Promise((r) => socket.once('close', r));
    return { status, headers, body };
  }
  const conn = transport.connection.create(socket, { protocol: 'spdy', isServer: false });
  conn.on('error', () => socket.destroy());
  const framer = (conn as unknown as { _spdyState: { framer: Record<string, (...args: unknown[]) => unknown> } })._spdyState.framer;
  const headersToDict = framer.headersToDict!.bind(framer);
  framer.headersToDict = (h, _preprocess, callback) => headersToDict(h, null, callback);
  const skipFrame = (_frame: unknown, callback: unknown) => (callback as (() => void) | undefined)?.();
  // So the server's send window stays at SPDY's 64 KiB.
  framer.settingsFrame = skipFrame;
  framer.windowUpdateFrame = skipFrame;
  conn.start(3);
  return { status, headers, body: '', conn, socket };
}

/** Opens a stream with `headers` and waits for the server's reply. */
export async function openStream(conn: transport.SpdyConnection, headers: Record<string, string>): Promise<transport.SpdyStream> {
  const stream = conn.request({ method: 'POST', path: '/', headers });
  stream.on('error', () => {});
  await new Promise((resolve, reject) => {
    stream.once('response', resolve);
    stream.once('close', () => reject(new Error(`stream ${JSON.stringify(headers)} was reset`)));
  });
  return stream;
}

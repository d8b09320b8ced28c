import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { Readable } from 'node:stream';
import t, { type Test } from 'tap';
import { pino } from 'pino';
import type transport from 'spdy-transport';
import { WebSocket } from 'ws';
import { openStream, upgradeSpdy } from '../../../test/helpers/spdy-client.js';
import { createAgentMetrics } from '../../metrics.js';
import type { AuthBackend, UserInfo } from '../auth.js';
import { NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
import type { SessionLimits } from '../session-limiter.js';
import { invalidStream, requestIdOf } from '../streaming/port-forward-spdy.js';
import { ignorePeerWindow } from '../streaming/spdy-connection.js';
import { parsePorts } from '../streaming/port-forward-websocket.js';
import type { VmAccess } from '../vm-access.js';
import { noVmis } from '../../../test/helpers/vm-access.js';

// --- the guest side: servers standing in for the VM's ports -------------------

async function listen(t: Test, server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const sockets = new Set<Socket>();
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

/** A guest port that reads nothing until told to, then counts what it reads. */
function sink() {
  const state = { received: 0, reading: () => {} };
  const server = createServer((s) => {
    s.pause();
    state.reading = () => {
      s.on('data', (d: Buffer) => (state.received += d.length));
      s.resume();
    };
  });
  return { server, state };
}

/** Guest ports: 80 echoes until the client half-closes, 81 refuses, 82 greets and hangs up, 83 is a sink. */
async function guest(t: Test, slow: ReturnType<typeof sink>) {
  const echo = await listen(
    t,
    createServer({ allowHalfOpen: true }, (s) => s.pipe(s)),
  );
  const greet = await listen(
    t,
    createServer((s) => s.end('hello from the guest\n')),
  );
  const closed = createServer();
  const refused = await new Promise<number>((resolve) =>
    closed.listen(0, '127.0.0.1', () => {
      const { port } = closed.address() as AddressInfo;
      closed.close(() => resolve(port));
    }),
  );
  return new Map([
    [80, echo],
    [81, refused],
    [82, greet],
    [83, await listen(t, slow.server)],
  ]);
}

async function serve(t: Test, opts: { sessionLimits?: SessionLimits; streamingIdleTimeoutMs?: number } = {}) {
  const slow = sink();
  const ports = await guest(t, slow);
  const connected: number[] = [];
  const vms: VmAccess = {
    attachConsole: () => Promise.reject(new Error('not in this test')),
    guestExec: () => Promise.reject(new Error('not in this test')),
    consoleLogPath: () => Promise.reject(new Error('not in this test')),
    listVmUsage: async () => [],
    ...noVmis,
    vncDisplay: () => Promise.reject(new Error('not in this test')),
    async podPorts(ref) {
      if (ref.name !== 'vm1') throw new NotFoundError(`pod ${ref.namespace}/${ref.name} not found on this node`);
      return {
        uid: 'uid-1',
        connectUdp: () => Promise.reject(new Error('not in this test')),
        connect: (port) =>
          new Promise((resolve, reject) => {
            connected.push(port);
            const socket = connect({ host: '127.0.0.1', port: ports.get(port) ?? 1, allowHalfOpen: true });
            socket.once('error', reject);
            socket.once('connect', () => resolve(socket));
          }),
      };
    },
  };
  const users: Record<string, UserInfo> = { ops: { username: 'ops', uid: 'a', groups: [] }, dev: { username: 'dev', groups: [] } };
  const sars: string[] = [];
  const backend: AuthBackend = {
    reviewToken: async (token) => users[token] ?? null,
    async authorize(user, attrs) {
      sars.push(`${user.username} ${attrs.verb} nodes/${attrs.subresource}`);
      return user.username === 'ops' ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
    },
  };
  const metrics = createAgentMetrics();
  const app = await buildKubeletApi({ nodeName: 'n1', backend, listPods: () => [], log: pino({ level: 'silent' }), vms, metrics, ...opts });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const openSessions = async () =>
    (await metrics.streamingSessions.get()).values.find((v) => v.labels.endpoint === 'portForward')?.value ?? 0;
  return { server: app.server, port: (app.server.address() as AddressInfo).port, sars, connected, openSessions, sink: slow.state };
}

/** Waits until `check` holds; past 20 s, fails saying what was awaited and what was seen. */
async function until(what: string, check: () => boolean | Promise<boolean>, seen: () => unknown): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not reached; last seen ${JSON.stringify(await seen())}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const collect = (stream: Readable): Promise<Buffer> =>
  new Promise((resolve) => {
    const chunks: Buffer[] = [];
    stream.on('data', (d: Buffer) => chunks.push(d));
    stream.once('end', () => resolve(Buffer.concat(chunks)));
  });

/**
 * One forwarded connection as client-go makes it: the error stream first (its
 * writing side closed at once), then the data stream; the payload is sent and
 * the data stream half-closed; the answer is read to its end.
 */
async function forward(conn: transport.SpdyConnection, port: number, requestId: string | undefined, payload: Buffer) {
  const ids: Record<string, string> = requestId === undefined ? {} : { requestid: requestId };
  const error = await openStream(conn, { streamtype: 'error', port: String(port), ...ids });
  const errorText = collect(error);
  error.end();
  const data = await openStream(conn, { streamtype: 'data', port: String(port), ...ids });
  const answer = collect(data);
  data.end(payload);
  return { data: (await answer).toString(), error: (await errorText).toString() };
}

async function spdySession(t: Test, port: number, token = 'ops') {
  const upgrade = await upgradeSpdy(port, '/portForward/default/vm1', { token, protocols: ['portforward.k8s.io'] });
  if (!upgrade.conn) throw new Error(`upgrade refused: ${upgrade.status} ${upgrade.body}`);
  t.teardown(() => upgrade.socket.destroy());
  return upgrade;
}

// --- tests ---------------------------------------------------------------------

t.test('stream headers and ports are checked as the kubelet checks them', async (t) => {
  t.same(
    [
      invalidStream({ streamtype: 'data' }),
      invalidStream({ port: 'http', streamtype: 'data' }),
      invalidStream({ port: '0', streamtype: 'data' }),
      invalidStream({ port: '70000', streamtype: 'data' }),
      invalidStream({ port: '80' }),
      invalidStream({ port: '80', streamtype: 'stdin' }),
      invalidStream({ port: '80', streamtype: 'error' }),
    ],
    [
      '"port" header is required',
      'unable to parse "http" as a port',
      'port "0" must be > 0',
      'unable to parse "70000" as a port',
      '"streamType" header is required',
      'invalid stream type "stdin"',
      undefined,
    ],
  );
  t.same(
    [
      requestIdOf({ id: 5, headers: { streamtype: 'data', requestid: '7' } }),
      requestIdOf({ id: 1, headers: { streamtype: 'error' } }),
      requestIdOf({ id: 3, headers: { streamtype: 'data' } }),
    ],
    ['7', '1', '1'],
    'without requestID, error and data streams pair by consecutive stream ids',
  );
  t.same(
    [parsePorts(['80', '8080,22']), parsePorts([]), parsePorts(['']), parsePorts(['80,x']), parsePorts(['0'])],
    [
      [80, 8080, 22],
      'query parameter "port" is required',
      'query parameter "port" cannot be empty',
      'unable to parse "80,x" as a port',
      'port "0" must be > 0',
    ],
  );
});

t.test('SPDY: concurrent connections each reach their port, and a half-closed request still gets its whole answer', async (t) => {
  const s = await serve(t);
  const { conn } = await spdySession(t, s.port);
  const big = Buffer.alloc(3 * 1024 * 1024, 'v');
  const [a, b, greeting, large] = await Promise.all([
    forward(conn, 80, '0', Buffer.from('first\n')),
    forward(conn, 80, '1', Buffer.from('second\n')),
    forward(conn, 82, '2', Buffer.alloc(0)),
    forward(conn, 80, '3', big),
  ]);
  t.same(
    { a, b, greeting, large: { length: large.data.length, intact: large.data === big.toString(), error: large.error } },
    {
      a: { data: 'first\n', error: '' },
      b: { data: 'second\n', error: '' },
      greeting: { data: 'hello from the guest\n', error: '' },
      large: { length: big.length, intact: true, error: '' },
    },
    'echoes and the greeting come back whole, past any flow-control window, with nothing on the error streams',
  );
  t.same(s.sars, ['ops create nodes/proxy'], 'authorized as the kubelet does: create on nodes/proxy');
});

t.test('SPDY: a guest that does not read makes the agent stop reading the client, rather than buffer its upload', async (t) => {
  const s = await serve(t);
  const agentSide: Socket[] = [];
  s.server.on('upgrade', (_req, socket: Socket) => agentSide.push(socket));
  const { conn } = await spdySession(t, s.port);
  await openStream(conn, { streamtype: 'error', port: '83', requestid: '0' }).then((e) => e.end());
  const data = await openStream(conn, { streamtype: 'data', port: '83', requestid: '0' });
  // As spdystream: no regard for the agent's receive window.
  ignorePeerWindow(data);
  const total = 64 * 1024 * 1024;
  for (let sent = 0; sent < total; sent += 1024 * 1024) data.write(Buffer.alloc(1024 * 1024, 's'));
  await until(
    'the agent pausing its socket',
    () => agentSide[0]?.isPaused() ?? false,
    () => s.sink.received,
  );
  t.pass('the agent stops reading the connection while the guest reads nothing');
  s.sink.reading();
  await until(
    'the whole upload at the guest',
    () => s.sink.received === total,
    () => s.sink.received,
  );
  t.pass('all of it reaches the guest once it reads');
});

t.test('SPDY: a port nothing listens on is reported on its error stream, and the session goes on', async (t) => {
  const s = await serve(t);
  const { conn } = await spdySession(t, s.port);
  const refused = await forward(conn, 81, '0', Buffer.from('anyone?'));
  t.match(refused, { data: '', error: /^error forwarding port 81 to pod vm1_default, uid uid-1: connect ECONNREFUSED/ });
  const legacy = await forward(conn, 80, undefined, Buffer.from('no request id\n'));
  t.same(legacy, { data: 'no request id\n', error: '' }, 'a client without requestID headers is paired by stream id');
});

t.test('SPDY: a stream without a port is reset, and nothing is connected for it', async (t) => {
  const s = await serve(t);
  const { conn } = await spdySession(t, s.port);
  await t.rejects(openStream(conn, { streamtype: 'data' }), /was reset/);
  t.same(s.connected, []);
});

t.test('requests that may not forward are refused before the upgrade', async (t) => {
  const s = await serve(t);
  const spdy = (path: string, token: string | undefined, protocols = ['portforward.k8s.io']) =>
    upgradeSpdy(s.port, path, { token, protocols }).then((u) => {
      u.conn?.end();
      return { status: u.status, body: u.body, accepted: u.headers['x-accepted-stream-protocol-versions'] };
    });
  t.match(
    {
      anonymous: await spdy('/portForward/default/vm1', undefined),
      viewer: await spdy('/portForward/default/vm1', 'dev'),
      unknownPod: await spdy('/portForward/default/vm2', 'ops'),
      otherUid: await spdy('/portForward/default/vm1/uid-2', 'ops'),
      execProtocol: await spdy('/portForward/default/vm1', 'ops', ['v4.channel.k8s.io']),
      noUpgrade: await fetch(`http://127.0.0.1:${s.port}/portForward/default/vm1`, { headers: { authorization: 'Bearer ops' } }).then(
        async (r) => ({ status: r.status, body: await r.text() }),
      ),
    },
    {
      anonymous: { status: 401 },
      viewer: { status: 403, body: /user=dev, verb=create, resource=nodes, subresource=proxy/ },
      unknownPod: { status: 404, body: 'pod default/vm2 not found on this node' },
      otherUid: { status: 404, body: 'pod default/vm1 with UID uid-2 not found on this node' },
      execProtocol: { status: 403, accepted: 'portforward.k8s.io', body: /unable to negotiate protocol/ },
      noUpgrade: { status: 400, body: 'unable to upgrade: missing upgrade headers in request' },
    },
  );
  t.same(s.connected, [], 'no connection was made for any of them');
  t.equal(await s.openSessions(), 0, 'and no session slot is held');
});

interface WsForward {
  /** Bytes received so far, by channel. */
  received: Map<number, Buffer>;
  closed: Promise<number>;
  send(channel: number, data: string): void;
  until(check: () => boolean): Promise<void>;
}

function openWebSocket(port: number, path: string, protocols: string[]): Promise<WsForward | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}${path}`, protocols, { headers: { authorization: 'Bearer ops' } });
    const received = new Map<number, Buffer>();
    const waiters = new Set<() => void>();
    ws.on('message', (data: Buffer) => {
      received.set(data[0]!, Buffer.concat([received.get(data[0]!) ?? Buffer.alloc(0), data.subarray(1)]));
      for (const w of waiters) w();
    });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.on('error', reject);
    const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
    ws.on('open', () =>
      resolve({
        received,
        closed,
        send: (channel, data) => ws.send(Buffer.concat([Buffer.of(channel), Buffer.from(data)])),
        until: (check) =>
          new Promise((r) => {
            const w = () => check() && (waiters.delete(w), r());
            waiters.add(w);
            w();
          }),
      }),
    );
  });
}

t.test(
  'WebSocket: each port gets a data and an error channel, opened with the port, and the socket closes when all are done',
  async (t) => {
    const s = await serve(t);
    for (const protocols of [['v4.channel.k8s.io'], []]) {
      const ws = await openWebSocket(s.port, '/portForward/default/vm1?port=80&port=81,82', protocols);
      if (!('received' in ws)) throw new Error(`upgrade refused: ${ws.status} ${ws.body}`);
      ws.send(0, 'ping\n');
      await ws.until(() => ws.received.get(0)?.includes('ping\n') ?? false);
      const text = (channel: number) => ws.received.get(channel)?.subarray(2).toString();
      const prefix = (channel: number) => ws.received.get(channel)?.readUInt16LE(0);
      await ws.until(() => (text(3) ?? '') !== '' && (text(4) ?? '').endsWith('\n'));
      t.match(
        {
          prefixes: [0, 1, 2, 3, 4, 5].map(prefix),
          echo: text(0),
          refused: text(3),
          greeting: text(4),
          greetingError: text(5),
        },
        {
          prefixes: [80, 80, 81, 81, 82, 82],
          echo: 'ping\n',
          refused: /^error forwarding port 81 to pod vm1_default, uid uid-1: connect ECONNREFUSED/,
          greeting: 'hello from the guest\n',
          greetingError: '',
        },
        `subprotocol ${protocols[0] ?? '(none)'}`,
      );
    }
  },
);

t.test('WebSocket: the ports come from the query, and a missing one is a 400 naming it', async (t) => {
  const s = await serve(t);
  t.match(await openWebSocket(s.port, '/portForward/default/vm1', ['v4.channel.k8s.io']), {
    status: 400,
    body: 'query parameter "port" is required',
  });
  t.match(await openWebSocket(s.port, '/portForward/default/vm1?port=80', ['v5.channel.k8s.io']), {
    status: 400,
    body: /requested protocol\(s\) are not supported: \[v5.channel.k8s.io\]; supports \[v4.channel.k8s.io\]/,
  });
});

t.test('a session holds a slot of the streaming caps until it closes', async (t) => {
  const s = await serve(t, { sessionLimits: { perNode: 10, perUser: 1 } });
  const first = await spdySession(t, s.port);
  const second = await upgradeSpdy(s.port, '/portForward/default/vm1', { token: 'ops', protocols: ['portforward.k8s.io'] });
  t.match(
    { status: second.status, body: JSON.parse(second.body) as unknown },
    { status: 429, body: { reason: 'TooManyRequests', message: /^too many streaming sessions for user "ops"/ } },
  );
  first.socket.destroy();
  await until('the slot released', async () => (await s.openSessions()) === 0, s.openSessions);
  const third = await spdySession(t, s.port);
  t.equal(third.status, 101, 'the slot came back');
});

t.test('a session without traffic is closed after the idle timeout', async (t) => {
  const s = await serve(t, { streamingIdleTimeoutMs: 300 });
  const { conn, socket } = await spdySession(t, s.port);
  t.same(await forward(conn, 80, '0', Buffer.from('traffic\n')), { data: 'traffic\n', error: '' });
  await new Promise((r) => socket.once('close', r));
  t.equal(socket.destroyed, true, 'the agent closed the connection');
});

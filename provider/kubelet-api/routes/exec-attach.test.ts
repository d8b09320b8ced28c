import { Duplex } from 'node:stream';
import t, { type Test } from 'tap';
import { pino } from 'pino';
import type transport from 'spdy-transport';
import { upgradeSpdy, type HttpAnswer } from '../../../test/helpers/spdy-client.js';
import { WebSocket } from 'ws';
import type { AuthBackend, UserInfo } from '../auth.js';
import { NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
import { NoGuestAgentError, type ExecResult, type VmAccess } from '../vm-access.js';
import { createAgentMetrics } from '../../metrics.js';
import type { SessionLimits } from '../session-limiter.js';
import { MAX_MESSAGE_BYTES } from '../streaming/websocket.js';
import { sessionTarget, streamOptions } from './exec-attach.js';
import { noVmis } from '../../../test/helpers/vm-access.js';

// --- the node side: a fake VM access and an auth backend ----------------------

interface FakeConsole {
  duplex: Duplex;
  ended: boolean;
  destroyed: boolean;
}

/** A console that echoes its input, as a terminal does. */
function echoConsole(): FakeConsole {
  const state: FakeConsole = {
    ended: false,
    destroyed: false,
    duplex: new Duplex({
      read() {},
      write(chunk: Buffer, _encoding, callback) {
        this.push(chunk);
        callback();
      },
      final(callback) {
        state.ended = true;
        this.push(null);
        callback();
      },
      destroy(err, callback) {
        state.destroyed = true;
        callback(err);
      },
    }),
  };
  return state;
}

const BIG = Buffer.alloc(200 * 1024, 'x');

function fakeVms() {
  const consoles: FakeConsole[] = [];
  const execs: { pod: string; command: string[] }[] = [];
  const vms: VmAccess = {
    ...noVmis,
    async attachConsole(ref) {
      if (ref.name !== 'vm1') throw new NotFoundError(`pod ${ref.namespace}/${ref.name} not found`);
      const console = echoConsole();
      consoles.push(console);
      return console.duplex;
    },
    async guestExec(ref, command): Promise<ExecResult> {
      execs.push({ pod: ref.name, command });
      if (ref.name === 'noagent')
        throw new NoGuestAgentError(
          `pod default/noagent has no QEMU guest agent; use kubectl exec -it or kubectl attach for its serial console`,
        );
      if (command[0] === 'big') return { stdout: BIG, stderr: Buffer.alloc(0), exitCode: 0 };
      return { stdout: Buffer.from('out\n'), stderr: Buffer.from('err\n'), exitCode: 3 };
    },
    async consoleLogPath() {
      throw new NotFoundError('no logs here');
    },
    async podPorts() {
      throw new NotFoundError('no ports here');
    },
    async vncDisplay() {
      throw new NotFoundError('no display here');
    },
    async listVmUsage() {
      return [];
    },
  };
  return { vms, consoles, execs };
}

const users: Record<string, UserInfo> = {
  ops: { username: 'ops', uid: 'a', groups: [] },
  // Another user of the same name (a deleted and recreated account).
  'ops-b': { username: 'ops', uid: 'b', groups: [] },
  dev: { username: 'dev', groups: [] },
};

function fakeBackend() {
  const sars: string[] = [];
  const backend: AuthBackend = {
    async reviewToken(token) {
      return users[token] ?? null;
    },
    async authorize(user, attrs) {
      sars.push(`${user.username} ${attrs.verb} nodes/${attrs.subresource}`);
      return user.username === 'ops' ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
    },
  };
  return { backend, sars };
}

async function serve(t: Test, opts: { sessionLimits?: SessionLimits; streamingIdleTimeoutMs?: number } = {}) {
  const fake = fakeVms();
  const auth = fakeBackend();
  const logs: { msg: string }[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => logs.push(JSON.parse(line) as { msg: string }) });
  const metrics = createAgentMetrics();
  const app = await buildKubeletApi({ nodeName: 'n1', backend: auth.backend, listPods: () => [], log, vms: fake.vms, metrics, ...opts });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const address = app.server.address();
  const openSessions = async () => (await metrics.streamingSessions.get()).values.reduce((sum, v) => sum + v.value, 0);
  return {
    ...fake,
    app,
    sars: auth.sars,
    port: typeof address === 'object' && address ? address.port : 0,
    sessionsEnded: () => logs.filter((l) => l.msg === 'exec/attach session ended').length,
    openSessions,
    /** Waits until the open sessions are `n` (slots are released as connections close). */
    untilOpen: async (n: number) => {
      const deadline = Date.now() + 20_000;
      while ((await openSessions()) !== n) {
        if (Date.now() > deadline) throw new Error(`${await openSessions()} sessions open, not ${n}`);
        await new Promise((r) => setTimeout(r, 5));
      }
    },
    refused: async () =>
      Object.fromEntries(
        (await metrics.streamingSessionsRefused.get()).values.map((v) => [`${v.labels.limit} ${v.labels.endpoint}`, v.value]),
      ),
  };
}

// --- a WebSocket client speaking v5.channel.k8s.io ----------------------------

interface WsSession {
  /** Output so far, by channel. */
  received: Map<number, string>;
  send(channel: number, data: string | Buffer): void;
  until(channel: number, text: string): Promise<void>;
  /** Drops the connection without a close handshake. */
  terminate(): void;
  closed: Promise<number>;
}

function openWebSocket(port: number, path: string, token?: string): Promise<WsSession | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}${path}`, ['v5.channel.k8s.io'], {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    const received = new Map<number, string>();
    const waiters: (() => void)[] = [];
    ws.on('message', (data: Buffer) => {
      received.set(data[0]!, (received.get(data[0]!) ?? '') + data.subarray(1).toString());
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
        terminate: () => ws.terminate(),
        until: (channel, text) =>
          new Promise((r) => {
            const check = () => (received.get(channel) ?? '').includes(text) && r();
            waiters.push(check);
            check();
          }),
      }),
    );
  });
}

function isSession(s: WsSession | { status: number }): s is WsSession {
  return 'received' in s;
}

// --- a SPDY client behaving like client-go (moby/spdystream) -------------------

type StreamType = 'error' | 'stdin' | 'stdout' | 'stderr' | 'resize';

interface SpdySession extends HttpAnswer {
  streams: Map<StreamType, transport.SpdyStream>;
  /** Everything a stream carried, once it has ended. */
  read(type: StreamType): Promise<string>;
  /** A PING round trip (kube-apiserver pings every 5 s). */
  ping(): Promise<void>;
  /** What client-go does when its stream loop returns: reset every stream and hang up. */
  close(): void;
}

async function openSpdy(
  port: number,
  path: string,
  opts: { token?: string; protocols?: string[]; streams: StreamType[] },
): Promise<SpdySession> {
  const upgrade = await upgradeSpdy(port, path, { token: opts.token, protocols: opts.protocols ?? ['v4.channel.k8s.io'] });
  const { status, headers } = upgrade;
  const streams = new Map<StreamType, transport.SpdyStream>();
  if (!upgrade.conn) return { ...upgrade, streams, read: async () => '', ping: async () => {}, close: () => {} };
  const { conn, socket } = upgrade;
  const reads = new Map<StreamType, Promise<string>>();
  // One at a time, each after the server's reply, as client-go creates them.
  for (const type of opts.streams) {
    const stream = conn.request({ method: 'POST', path: '/', headers: { streamtype: type } });
    stream.on('error', () => {});
    await new Promise((r) => stream.once('response', r));
    streams.set(type, stream);
    let text = '';
    stream.on('data', (d: Buffer) => (text += d.toString()));
    reads.set(type, new Promise((r) => stream.once('end', () => r(text))));
  }
  return {
    status,
    headers,
    body: '',
    streams,
    read: (type) => reads.get(type)!,
    ping: () => new Promise((resolve) => (conn as unknown as { ping(cb: () => void): void }).ping(resolve)),
    close: () => {
      for (const s of streams.values()) s.abort();
      socket.destroy();
    },
  };
}

const untilTrue = async (check: () => boolean) => {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
};

// --- tests ---------------------------------------------------------------------

t.test('the session rule: attach and exec with stdin reach the console, other execs the guest agent', async (t) => {
  const q = (query: Record<string, string>) => streamOptions(query);
  t.same(
    {
      attach: sessionTarget('attach', q({ output: '1' })),
      execIt: sessionTarget('exec', q({ input: '1', output: '1', tty: '1' })),
      execI: sessionTarget('exec', q({ input: '1', output: '1' })),
      execT: sessionTarget('exec', q({ output: '1', tty: '1' })),
      execPlain: sessionTarget('exec', q({ stdout: 'true', stderr: 'true' })),
    },
    { attach: 'console', execIt: 'console', execI: 'console', execT: 'agent', execPlain: 'agent' },
  );
  t.same(
    q({ input: '1', output: '1', error: '1', tty: '1' }),
    { stdin: true, stdout: true, stderr: false, tty: true },
    'a TTY has no stderr',
  );
  t.throws(() => q({ tty: '1' }), { statusCode: 400, message: /at least 1 of stdin, stdout, stderr/ });
});

t.test('WebSocket v5: attach echoes through the console, and closing stdin detaches without touching the VM', async (t) => {
  const s = await serve(t);
  const ws = await openWebSocket(s.port, '/attach/default/vm1/vm?input=1&output=1&tty=1', 'ops');
  if (!isSession(ws)) throw new Error(`upgrade refused: ${ws.status}`);
  ws.send(0, 'hello\n');
  await ws.until(1, 'hello\n');
  ws.send(255, Buffer.of(0));
  const code = await ws.closed;
  t.match(
    {
      code,
      stdout: ws.received.get(1),
      status: JSON.parse(ws.received.get(3) ?? 'null'),
      console: { ended: s.consoles[0]?.ended },
      execs: s.execs,
    },
    { code: 1000, stdout: 'hello\n', status: { status: 'Success' }, console: { ended: true }, execs: [] },
  );
  t.same(s.sars, ['ops create nodes/proxy'], 'a WebSocket GET is authorized as create');
});

t.test('a percent-encoded path is authorized as the route it reaches', async (t) => {
  const s = await serve(t);
  const ws = await openWebSocket(s.port, '/%61ttach/default/vm1/vm?input=1&output=1', 'ops');
  if (isSession(ws)) ws.terminate();
  t.same(s.sars, ['ops create nodes/proxy'], '/%61ttach is checked as attach: verb create on nodes/proxy');
});

t.test('a client that disconnects takes its console attachment with it, and nothing else', async (t) => {
  const s = await serve(t);
  const ws = await openWebSocket(s.port, '/attach/default/vm1/vm?input=1&output=1&tty=1', 'ops');
  if (!isSession(ws)) throw new Error(`upgrade refused: ${ws.status}`);
  ws.send(0, 'x');
  await ws.until(1, 'x');
  ws.terminate();
  await untilTrue(() => s.consoles[0]!.destroyed);
  t.same(s.execs, [], 'no other call reached the VM');
});

t.test('WebSocket v5: exec reports stdout, stderr and the exit code', async (t) => {
  const s = await serve(t);
  const ws = await openWebSocket(s.port, '/exec/default/vm1/vm?command=sh&command=-c&command=exit%203&output=1&error=1', 'ops');
  if (!isSession(ws)) throw new Error(`upgrade refused: ${ws.status}`);
  await ws.closed;
  t.match(
    { stdout: ws.received.get(1), stderr: ws.received.get(2), status: JSON.parse(ws.received.get(3)!), execs: s.execs },
    {
      stdout: 'out\n',
      stderr: 'err\n',
      status: { status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '3' }] } },
      execs: [{ pod: 'vm1', command: ['sh', '-c', 'exit 3'] }],
    },
  );
});

t.test('WebSocket v5: exec -i types into the console; after the close signal output drains until the console is quiet', async (t) => {
  const s = await serve(t);
  const ws = await openWebSocket(s.port, '/exec/default/vm1/vm?command=sh&input=1&output=1', 'ops');
  if (!isSession(ws)) throw new Error(`upgrade refused: ${ws.status}`);
  ws.send(0, 'abc');
  ws.send(0, 'def');
  ws.send(255, Buffer.of(0));
  await ws.closed;
  t.match(
    { stdout: ws.received.get(1), status: JSON.parse(ws.received.get(3)!), console: { ended: s.consoles[0]?.ended }, execs: s.execs },
    { stdout: 'abcdef', status: { status: 'Success' }, console: { ended: true }, execs: [] },
    'the command is not run; the console echoed the input before the session ended',
  );
});

t.test('WebSocket upgrades are authenticated and authorized like any request', async (t) => {
  const s = await serve(t);
  const anonymous = await openWebSocket(s.port, '/exec/default/vm1/vm?command=ls&output=1');
  const denied = await openWebSocket(s.port, '/exec/default/vm1/vm?command=ls&output=1', 'dev');
  t.match(
    { anonymous, denied, execs: s.execs },
    { anonymous: { status: 401 }, denied: { status: 403, body: /user=dev, verb=create, resource=nodes, subresource=proxy/ }, execs: [] },
  );
});

t.test('SPDY v4: attach echoes through the console and detaches when the client closes stdin', async (t) => {
  const s = await serve(t);
  const spdy = await openSpdy(s.port, '/attach/default/vm1/vm?input=1&output=1&tty=1', {
    token: 'ops',
    streams: ['error', 'stdin', 'stdout', 'resize'],
  });
  t.match(
    { status: spdy.status, headers: spdy.headers },
    { status: 101, headers: { upgrade: 'SPDY/3.1', 'x-stream-protocol-version': 'v4.channel.k8s.io' } },
  );
  spdy.streams.get('resize')!.write('{"Width":80,"Height":24}');
  await spdy.ping();
  spdy.streams.get('stdin')!.write('hello\n');
  await untilTrue(() => s.consoles.length === 1);
  spdy.streams.get('stdin')!.end();
  const [stdout, status] = await Promise.all([spdy.read('stdout'), spdy.read('error')]);
  spdy.close();
  t.match(
    { stdout, status: JSON.parse(status), console: { ended: s.consoles[0]!.ended }, execs: s.execs },
    { stdout: 'hello\n', status: { status: 'Success' }, console: { ended: true }, execs: [] },
  );
});

t.test('SPDY v4: exec exit code 3 becomes NonZeroExitCode with an ExitCode cause', async (t) => {
  const s = await serve(t);
  const spdy = await openSpdy(s.port, '/exec/default/vm1/vm?command=sh&command=-c&command=exit%203&output=1&error=1', {
    token: 'ops',
    streams: ['error', 'stdout', 'stderr'],
  });
  const [stdout, stderr, status] = await Promise.all([spdy.read('stdout'), spdy.read('stderr'), spdy.read('error')]);
  spdy.close();
  t.match(
    { stdout, stderr, status: JSON.parse(status) },
    {
      stdout: 'out\n',
      stderr: 'err\n',
      status: { status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '3' }] } },
    },
  );
});

t.test('SPDY: a guest without an agent fails the exec with a message saying so', async (t) => {
  const s = await serve(t);
  const spdy = await openSpdy(s.port, '/exec/default/noagent/vm?command=ls&output=1', { token: 'ops', streams: ['error', 'stdout'] });
  const [stdout, status] = await Promise.all([spdy.read('stdout'), spdy.read('error')]);
  spdy.close();
  t.match({ stdout, status: JSON.parse(status) }, { stdout: '', status: { status: 'Failure', message: /has no QEMU guest agent/ } });
});

t.test('SPDY: output beyond the initial window flows though the client never sends WINDOW_UPDATE', async (t) => {
  const s = await serve(t);
  const spdy = await openSpdy(s.port, '/exec/default/vm1/vm?command=big&output=1', {
    protocols: ['v5.channel.k8s.io', 'v4.channel.k8s.io'],
    token: 'ops',
    streams: ['error', 'stdout'],
  });
  const [stdout, status] = await Promise.all([spdy.read('stdout'), spdy.read('error')]);
  spdy.close();
  t.match(
    { protocol: spdy.headers['x-stream-protocol-version'], bytes: stdout.length, status: JSON.parse(status) },
    { protocol: 'v5.channel.k8s.io', bytes: BIG.length, status: { status: 'Success' } },
  );
});

t.test('SPDY upgrades are refused as plain HTTP: 401, 403, 404, and 403 for an unknown protocol', async (t) => {
  const s = await serve(t);
  const attach = '/attach/default/vm1/vm?output=1';
  const answers = {
    anonymous: await openSpdy(s.port, attach, { streams: [] }),
    denied: await openSpdy(s.port, attach, { token: 'dev', streams: [] }),
    unknownPod: await openSpdy(s.port, '/attach/default/nope/vm?output=1', { token: 'ops', streams: [] }),
    oldProtocol: await openSpdy(s.port, attach, { token: 'ops', protocols: ['channel.k8s.io'], streams: [] }),
  };
  t.match(
    Object.fromEntries(
      Object.entries(answers).map(([k, a]) => [
        k,
        { status: a.status, body: a.body, accepted: a.headers['x-accepted-stream-protocol-versions'] },
      ]),
    ),
    {
      anonymous: { status: 401 },
      denied: { status: 403, body: /user=dev, verb=create/ },
      unknownPod: { status: 404, body: /default\/nope not found/ },
      oldProtocol: { status: 403, body: /unable to negotiate protocol/, accepted: /v4\.channel\.k8s\.io/ },
    },
  );
  t.same(s.consoles, [], 'no console was attached');
});

t.test('exec without an upgrade is a 400', async (t) => {
  const s = await serve(t);
  const res = await fetch(`http://127.0.0.1:${s.port}/exec/default/vm1/vm?command=ls&output=1`, {
    method: 'POST',
    headers: { authorization: 'Bearer ops' },
  });
  t.match({ status: res.status, body: await res.text() }, { status: 400, body: /missing upgrade headers/ });
});

// --- session limits and the idle timeout ----------------------------------------

const ATTACH = '/attach/default/vm1/vm?input=1&output=1&tty=1';

t.test('over a cap an upgrade is refused with 429 and a Status, before anything is opened', async (t) => {
  const s = await serve(t, { sessionLimits: { perNode: 3, perUser: 2 } });
  const held = [await openWebSocket(s.port, ATTACH, 'ops'), await openWebSocket(s.port, ATTACH, 'ops')];
  const overUser = { ws: await openWebSocket(s.port, ATTACH, 'ops'), spdy: await openSpdy(s.port, ATTACH, { token: 'ops', streams: [] }) };
  const sameNameOtherUid = await openWebSocket(s.port, ATTACH, 'ops-b');
  const overNode = await openWebSocket(s.port, '/exec/default/vm1/vm?command=ls&output=1', 'ops-b');
  t.ok([...held, sameNameOtherUid].every(isSession), 'up to the caps, sessions open');
  const userStatus = { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'TooManyRequests', code: 429 };
  const refusal = (a: WsSession | { status: number; body: string }) => {
    if (isSession(a)) throw new Error('the upgrade was accepted');
    return { status: a.status, body: JSON.parse(a.body) as unknown };
  };
  t.match(
    { ws: refusal(overUser.ws), spdy: refusal(overUser.spdy), overNode: refusal(overNode) },
    {
      ws: {
        status: 429,
        body: {
          ...userStatus,
          message: /^too many streaming sessions for user "ops" on node n1 \(limit 2, --max-streaming-sessions-per-user\)/,
        },
      },
      spdy: { status: 429, body: { ...userStatus, message: /for user "ops"/ } },
      overNode: {
        status: 429,
        body: { ...userStatus, message: /^too many streaming sessions on node n1 \(limit 3, --max-streaming-sessions\)/ },
      },
    },
  );
  t.same(
    { consoles: s.consoles.length, execs: s.execs, refused: await s.refused() },
    { consoles: 3, execs: [], refused: { 'user attach': 2, 'node exec': 1 } },
    'refused sessions reached no console and ran nothing',
  );
  (held[0] as WsSession).terminate();
  await s.untilOpen(2);
  t.ok(isSession(await openWebSocket(s.port, ATTACH, 'ops')), 'a closed session gives its slot back');
});

t.test('every way a session ends gives its slot back, once', async (t) => {
  const s = await serve(t, { sessionLimits: { perNode: 1, perUser: 1 } });
  const session = async () => {
    const ws = await openWebSocket(s.port, ATTACH, 'ops');
    if (!isSession(ws)) throw new Error(`upgrade refused: ${ws.status} ${ws.body}`);
    return ws;
  };
  const ended: string[] = [];
  const step = async (name: string, run: () => Promise<unknown>) => {
    await run();
    await s.untilOpen(0);
    ended.push(name);
  };

  await step('the client closes stdin', async () => {
    const ws = await session();
    ws.send(255, Buffer.of(0));
    await ws.closed;
  });
  await step('the client disconnects', async () => {
    const ws = await session();
    ws.terminate();
  });
  await step('the console ends (the VM stopped)', async () => {
    const ws = await session();
    s.consoles.at(-1)!.duplex.push(null);
    await ws.closed;
  });
  await step('a message over the size limit', async () => {
    const ws = await session();
    ws.send(0, Buffer.alloc(MAX_MESSAGE_BYTES + 1));
    t.equal(await ws.closed, 1009, 'closed as too big');
  });
  await step('a guest agent exec over SPDY runs to its end', async () => {
    const spdy = await openSpdy(s.port, '/exec/default/vm1/vm?command=ls&output=1', { token: 'ops', streams: ['error', 'stdout'] });
    await spdy.read('error');
    spdy.close();
  });
  await step('the SPDY client leaves before creating its streams', async () => {
    const spdy = await openSpdy(s.port, ATTACH, { token: 'ops', streams: [] });
    t.equal(spdy.status, 101);
    spdy.close();
  });
  await step('the pod is unknown (404 after the slot was taken)', async () => {
    t.match(await openWebSocket(s.port, '/attach/default/nope/vm?output=1', 'ops'), { status: 404 });
  });
  t.same(ended.length, 7);

  const last = await session();
  t.match(await openWebSocket(s.port, ATTACH, 'ops'), { status: 429 }, 'the cap still holds: no slot was given back twice');
  await s.app.close();
  await last.closed;
  await s.untilOpen(0);
  t.pass('closing the API ends its sessions and frees their slots');
});

t.test('a console session without traffic is closed with a status saying why, over WebSocket and SPDY', async (t) => {
  const s = await serve(t, { streamingIdleTimeoutMs: 100 });
  const ws = await openWebSocket(s.port, ATTACH, 'ops');
  if (!isSession(ws)) throw new Error(`upgrade refused: ${ws.status}`);
  const code = await ws.closed;
  const spdy = await openSpdy(s.port, '/attach/default/vm1/vm?input=1&output=1', { token: 'ops', streams: ['error', 'stdin', 'stdout'] });
  const spdyStatus = await spdy.read('error');
  spdy.close();
  await s.untilOpen(0);
  const idle = {
    status: 'Failure',
    reason: 'Timeout',
    code: 408,
    message: 'session closed after 100ms without traffic (--streaming-connection-idle-timeout)',
  };
  t.match(
    {
      code,
      ws: JSON.parse(ws.received.get(3)!) as unknown,
      spdy: JSON.parse(spdyStatus) as unknown,
      consoles: s.consoles.map((c) => c.ended),
      execs: s.execs,
    },
    { code: 1000, ws: idle, spdy: idle, consoles: [true, true], execs: [] },
    'both detached from the console; the VM is untouched',
  );
});

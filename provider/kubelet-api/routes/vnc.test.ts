import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { pino } from 'pino';
import { WebSocket } from 'ws';
import { upgradeSpdy } from '../../../test/helpers/spdy-client.js';
import { createAgentMetrics } from '../../metrics.js';
import type { AuthBackend, UserInfo } from '../auth.js';
import { BadRequestError, NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
import type { VmAccess } from '../vm-access.js';
import { noVmis } from '../../../test/helpers/vm-access.js';

const GREETING = 'RFB 003.008\n';

/** A stand-in for QEMU's VNC server on a unix socket: greets as RFB does, then echoes. */
async function vncServer(t: Test): Promise<{ path: string; connections: () => number }> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-vnc-'));
  const path = join(dir, 'vnc.sock');
  const sockets = new Set<Socket>();
  let count = 0;
  const server = createServer({ allowHalfOpen: true }, (s) => {
    count++;
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.write(GREETING);
    s.pipe(s);
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  t.teardown(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
    await rm(dir, { recursive: true, force: true });
  });
  return { path, connections: () => count };
}

async function serve(t: Test, opts: { streamingIdleTimeoutMs?: number } = {}) {
  const display = await vncServer(t);
  const vms: VmAccess = {
    attachConsole: () => Promise.reject(new Error('not in this test')),
    guestExec: () => Promise.reject(new Error('not in this test')),
    consoleLogPath: () => Promise.reject(new Error('not in this test')),
    podPorts: () => Promise.reject(new Error('not in this test')),
    ...noVmis,
    listVmUsage: async () => [],
    async vncDisplay(ref) {
      if (ref.name === 'stopped') throw new BadRequestError(`the VM of pod ${ref.namespace}/stopped is not running`);
      if (ref.name !== 'vm1' && ref.name !== 'headless') throw new NotFoundError(`pod ${ref.namespace}/${ref.name} not found on this node`);
      return {
        uid: `uid-${ref.name}`,
        connect: () =>
          ref.name === 'headless'
            ? Promise.reject(new BadRequestError('No graphics devices are present.'))
            : new Promise((resolve, reject) => {
                const s = connect({ path: display.path, allowHalfOpen: true });
                s.once('error', reject);
                s.once('connect', () => resolve(s));
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
  const app = await buildKubeletApi({
    nodeName: 'n1',
    backend,
    listPods: () => [],
    log: pino({ level: 'silent' }),
    vms,
    metrics: createAgentMetrics(),
    ...opts,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { port: (app.server.address() as AddressInfo).port, sars, display };
}

interface Session {
  ws: WebSocket;
  protocol: string;
  received: () => string;
  until(text: string): Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

function open(port: number, path: string, token: string | null = 'ops'): Promise<Session | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}${path}`, ['plain.kubevirt.io'], {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    let received = '';
    const waiters = new Set<() => void>();
    ws.on('message', (data: Buffer) => {
      received += data.toString();
      for (const w of waiters) w();
    });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.on('error', reject);
    const closed = new Promise<{ code: number; reason: string }>((r) =>
      ws.on('close', (code, reason) => r({ code, reason: reason.toString() })),
    );
    ws.on('open', () =>
      resolve({
        ws,
        protocol: ws.protocol,
        received: () => received,
        closed,
        until: (text) =>
          new Promise((r) => {
            const w = () => received.includes(text) && (waiters.delete(w), r());
            waiters.add(w);
            w();
          }),
      }),
    );
  });
}

function session(s: Session | { status: number; body: string }): Session {
  if ('ws' in s) return s;
  throw new Error(`upgrade refused: ${s.status} ${s.body}`);
}

t.test('a VNC session carries raw RFB bytes both ways in binary messages', async (t) => {
  const s = await serve(t);
  const vnc = session(await open(s.port, '/vnc/default/vm1'));
  await vnc.until(GREETING);
  vnc.ws.send(Buffer.from('RFB 003.008\n'));
  await vnc.until(GREETING + 'RFB 003.008\n');
  vnc.ws.close(1000);
  t.same(
    { protocol: vnc.protocol, received: vnc.received(), closed: (await vnc.closed).code, sars: s.sars },
    { protocol: 'plain.kubevirt.io', received: GREETING + 'RFB 003.008\n', closed: 1000, sars: ['ops create nodes/proxy'] },
    'the server greets first, the client is echoed, and the session is authorized as create on nodes/proxy',
  );
});

t.test('a new session replaces the one before; with preserveSession=true it is refused instead', async (t) => {
  const s = await serve(t);
  const first = session(await open(s.port, '/vnc/default/vm1'));
  await first.until(GREETING);
  const kept = await open(s.port, '/vnc/default/vm1?preserveSession=true');
  t.match(kept, { status: 503, body: 'the VNC display of pod default/vm1 is in use by another session, which preserveSession keeps' });
  const second = session(await open(s.port, '/vnc/default/vm1'));
  await second.until(GREETING);
  t.same(await first.closed, { code: 1000, reason: 'a new VNC session replaced this one' }, 'the first session was closed');
  second.ws.close();
  await second.closed;
  // Closed: the display is free again for a session that wants to keep it.
  let third: Session | { status: number; body: string } = { status: 0, body: '' };
  for (let i = 0; i < 100 && !('ws' in third); i++) {
    third = await open(s.port, '/vnc/default/vm1?preserveSession=true');
    if (!('ws' in third)) await new Promise((r) => setTimeout(r, 20));
  }
  await session(third).until(GREETING);
  t.equal(s.display.connections(), 3, 'the refused request never reached the display');
});

t.test('requests that may not reach a display are refused before the upgrade', async (t) => {
  const s = await serve(t);
  const spdy = await upgradeSpdy(s.port, '/vnc/default/vm1', { token: 'ops', protocols: ['v4.channel.k8s.io'], method: 'GET' });
  t.match(
    {
      anonymous: await open(s.port, '/vnc/default/vm1', null),
      viewer: await open(s.port, '/vnc/default/vm1', 'dev'),
      unknown: await open(s.port, '/vnc/default/vm9'),
      stopped: await open(s.port, '/vnc/default/stopped'),
      headless: await open(s.port, '/vnc/default/headless'),
      badFlag: await open(s.port, '/vnc/default/vm1?preserveSession=maybe'),
      spdy: { status: spdy.status, body: spdy.body },
    },
    {
      anonymous: { status: 401 },
      viewer: { status: 403, body: /user=dev, verb=create, resource=nodes, subresource=proxy/ },
      unknown: { status: 404, body: 'pod default/vm9 not found on this node' },
      stopped: { status: 400, body: 'the VM of pod default/stopped is not running' },
      headless: { status: 400, body: 'No graphics devices are present.' },
      badFlag: { status: 400, body: /preserveSession/ },
      spdy: { status: 400, body: 'unable to upgrade: the VNC display is served over WebSocket only' },
    },
  );
  t.equal(s.display.connections(), 0);
});

t.test('a session without traffic is closed with the idle message the other streaming paths give', async (t) => {
  const s = await serve(t, { streamingIdleTimeoutMs: 100 });
  const vnc = session(await open(s.port, '/vnc/default/vm1'));
  await vnc.until(GREETING);
  t.same(await vnc.closed, { code: 1000, reason: 'session closed after 100ms without traffic (--streaming-connection-idle-timeout)' });
});

// The node's VMI port-forward over a real listening kubelet API (plain HTTP,
// bearer tokens) with a fake VM access whose ports are local TCP and UDP echo
// servers: bytes and datagrams through, the SubjectAccessReview it sends,
// refusals before the upgrade, the streaming caps and the idle timeout.
import { createSocket } from 'node:dgram';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { WebSocket } from 'ws';
import { createAgentMetrics } from '../../metrics.js';
import type { AuthBackend, ResourceAttributes, UserInfo } from '../auth.js';
import { BadRequestError, NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
import type { SessionLimits } from '../session-limiter.js';
import type { VmAccess } from '../vm-access.js';
import { forwardTarget } from './vmi-port-forward.js';

const VMI = '/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances';

/** How often the talker (TCP 25) writes, and how many times. */
const TALK_EVERY_MS = 50;
const TALKS = 36;

/**
 * Guest ports: TCP 22 and UDP 53 echo; nothing listens on TCP 23; TCP 24
 * swallows its input; TCP 25 says nothing but TALKS bytes, one every
 * TALK_EVERY_MS.
 */
async function guest(t: Test) {
  const sockets = new Set<Socket>();
  const server = async (serve: (s: Socket) => void) => {
    const tcp = createServer({ allowHalfOpen: true }, (s) => {
      sockets.add(s);
      // Reset by the node when a stream ends: nothing to report.
      s.on('error', () => {});
      serve(s);
    });
    await new Promise<void>((resolve) => tcp.listen(0, '127.0.0.1', resolve));
    t.teardown(() => tcp.close());
    return (tcp.address() as AddressInfo).port;
  };
  const echo = await server((s) => s.pipe(s));
  const sink = await server((s) => s.resume());
  const talker = await server((s) => {
    let said = 0;
    const timer = setInterval(() => {
      if (++said === TALKS) clearInterval(timer);
      s.write('o');
    }, TALK_EVERY_MS);
    s.once('close', () => clearInterval(timer));
  });
  const udp = createSocket('udp4');
  udp.on('message', (msg, from) => udp.send(Buffer.concat([Buffer.from('echo:'), msg]), from.port, from.address));
  await new Promise<void>((resolve) => udp.bind(0, '127.0.0.1', resolve));
  const closed = createServer();
  const refused = await new Promise<number>((resolve) =>
    closed.listen(0, '127.0.0.1', () => {
      const { port } = closed.address() as AddressInfo;
      closed.close(() => resolve(port));
    }),
  );
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    udp.close();
  });
  return {
    tcp: { 22: echo, 23: refused, 24: sink, 25: talker } as Record<number, number>,
    udp: (udp.address() as AddressInfo).port,
  };
}

async function serve(t: Test, opts: { sessionLimits?: SessionLimits; streamingIdleTimeoutMs?: number } = {}) {
  const ports = await guest(t);
  const users: Record<string, UserInfo> = { editor: { username: 'editor', groups: [] }, viewer: { username: 'viewer', groups: [] } };
  const sars: ResourceAttributes[] = [];
  const backend: AuthBackend = {
    reviewToken: async (token) => users[token] ?? null,
    async authorize(user, attrs) {
      sars.push(attrs);
      return user.username === 'editor' ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
    },
  };
  const vms: VmAccess = {
    vmiPod(namespace, name) {
      if (name !== 'testvm' && name !== 'stopped')
        throw new NotFoundError(`virtualmachineinstance ${namespace}/${name} has no launcher pod on this node`);
      return { namespace, name: `virt-launcher-${name}-x`, container: 'compute', vmiUid: `uid-${name}` };
    },
    async podPorts(ref) {
      const stopped = () => {
        if (ref.name === 'virt-launcher-stopped-x') throw new BadRequestError(`the VM of pod ns/${ref.name} is not running`);
      };
      return {
        uid: 'pod-uid',
        connect: (port) =>
          new Promise((resolve, reject) => {
            stopped();
            const s = connect({ host: '127.0.0.1', port: ports.tcp[port] ?? 1, allowHalfOpen: true });
            s.once('error', reject);
            s.once('connect', () => resolve(s));
          }),
        connectUdp: (port) =>
          new Promise((resolve) => {
            stopped();
            const s = createSocket('udp4');
            s.connect(port === 53 ? ports.udp : 1, '127.0.0.1', () => resolve(s));
          }),
      };
    },
    attachConsole: () => Promise.reject(new Error('unused')),
    guestUsers: () => Promise.reject(new Error('unused')),
    guestFilesystems: () => Promise.reject(new Error('unused')),
    guestInfo: () => Promise.reject(new Error('unused')),
    softReboot: () => Promise.reject(new Error('unused')),
    guestExec: () => Promise.reject(new Error('unused')),
    consoleLogPath: () => Promise.reject(new Error('unused')),
    vncDisplay: () => Promise.reject(new Error('unused')),
    listVmUsage: async () => [],
  };
  const metrics = createAgentMetrics();
  const app = await buildKubeletApi({ nodeName: 'n1', backend, listPods: () => [], log: pino({ level: 'silent' }), vms, metrics, ...opts });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const openSessions = async () => (await metrics.streamingSessions.get()).values.reduce((sum, v) => sum + v.value, 0);
  /** Waits until `n` sessions are open (slots are released as connections close). */
  const untilOpen = async (n: number) => {
    const deadline = Date.now() + 10_000;
    while ((await openSessions()) !== n) {
      if (Date.now() > deadline) throw new Error(`${await openSessions()} sessions open, not ${n}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  return { port: (app.server.address() as AddressInfo).port, sars, untilOpen };
}

interface Stream {
  ws: WebSocket;
  messages: Buffer[];
  until(ok: () => boolean): Promise<void>;
  closed: Promise<number>;
  /** The close frame's reason. */
  reason: Promise<string>;
}

function open(port: number, path: string, token = 'editor'): Promise<Stream | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}${VMI}/${path}`, ['plain.kubevirt.io'], {
      headers: { authorization: `Bearer ${token}` },
    });
    const messages: Buffer[] = [];
    const waiters = new Set<() => void>();
    ws.on('message', (d: Buffer) => {
      messages.push(d);
      for (const w of waiters) w();
    });
    const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
    const reason = new Promise<string>((r) => ws.on('close', (_code, why: Buffer) => r(why.toString())));
    ws.once('open', () =>
      resolve({
        ws,
        messages,
        closed,
        reason,
        until: (ok) =>
          new Promise((r) => {
            const w = () => ok() && (waiters.delete(w), r());
            waiters.add(w);
            w();
          }),
      }),
    );
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once('error', reject);
  });
}

const stream = (s: Stream | { status: number; body: string }): Stream => {
  if ('ws' in s) return s;
  throw new Error(`refused: ${s.status} ${s.body}`);
};

t.test('the path names a port from 1 to 65535 and tcp (the default) or udp', async (t) => {
  t.same(
    [
      forwardTarget({ namespace: 'ns', name: 'vm', port: '22' }),
      forwardTarget({ namespace: 'ns', name: 'vm', port: '53', protocol: 'udp' }),
    ],
    [
      { port: 22, protocol: 'tcp' },
      { port: 53, protocol: 'udp' },
    ],
  );
  t.throws(() => forwardTarget({ namespace: 'ns', name: 'vm', port: '0' }), {
    statusCode: 400,
    message: 'port "0" must be a number from 1 to 65535',
  });
  t.throws(() => forwardTarget({ namespace: 'ns', name: 'vm', port: '22', protocol: 'sctp' }), {
    statusCode: 400,
    message: 'protocol "sctp" must be tcp or udp',
  });
});

t.test('TCP: bytes both ways to the guest port, authorized as the VMI portforward subresource', async (t) => {
  const s = await serve(t);
  const tcp = stream(await open(s.port, 'testvm/portforward/22/tcp'));
  tcp.ws.send(Buffer.from('SSH-2.0-test\r\n'));
  await tcp.until(() => Buffer.concat(tcp.messages).toString() === 'SSH-2.0-test\r\n');
  tcp.ws.close(1000);
  t.equal(await tcp.closed, 1000);
  t.same(s.sars, [
    {
      verb: 'get',
      group: 'subresources.kubevirt.io',
      resource: 'virtualmachineinstances',
      subresource: 'portforward',
      namespace: 'ns',
      name: 'testvm',
    },
  ]);
});

t.test('UDP: one message per datagram, each way', async (t) => {
  const s = await serve(t);
  const udp = stream(await open(s.port, 'testvm/portforward/53/udp'));
  udp.ws.send(Buffer.from('one'));
  udp.ws.send(Buffer.from('two'));
  await udp.until(() => udp.messages.length === 2);
  udp.ws.close(1000);
  t.same(
    { messages: udp.messages.map((m) => m.toString()).sort(), closed: await udp.closed },
    { messages: ['echo:one', 'echo:two'], closed: 1000 },
  );
});

t.test('refused before the upgrade: a closed port, a stopped VM, an unknown VMI, a bad path, no grant', async (t) => {
  const s = await serve(t);
  t.match(
    {
      closed: await open(s.port, 'testvm/portforward/23'),
      stopped: await open(s.port, 'stopped/portforward/22/tcp'),
      unknown: await open(s.port, 'nosuch/portforward/22/tcp'),
      badPort: await open(s.port, 'testvm/portforward/99999/tcp'),
      viewer: await open(s.port, 'testvm/portforward/22/tcp', 'viewer'),
    },
    {
      closed: { status: 502, body: /^error forwarding port 23\/tcp to VMI ns\/testvm: connect ECONNREFUSED/ },
      stopped: { status: 400, body: 'the VM of pod ns/virt-launcher-stopped-x is not running' },
      unknown: { status: 404, body: 'virtualmachineinstance ns/nosuch has no launcher pod on this node' },
      badPort: { status: 400, body: 'port "99999" must be a number from 1 to 65535' },
      viewer: { status: 403, body: /resource=virtualmachineinstances, subresource=portforward, namespace=ns/ },
    },
  );
});

const IDLE = (ms: number) => `session closed after ${ms}ms without traffic (--streaming-connection-idle-timeout)`;

t.test('a stream without traffic either way is closed with the idle message, over TCP and UDP', async (t) => {
  const s = await serve(t, { streamingIdleTimeoutMs: 100 });
  const tcp = stream(await open(s.port, 'testvm/portforward/22/tcp'));
  const udp = stream(await open(s.port, 'testvm/portforward/53/udp'));
  t.same(
    { tcp: [await tcp.closed, await tcp.reason], udp: [await udp.closed, await udp.reason] },
    { tcp: [1000, IDLE(100)], udp: [1000, IDLE(100)] },
  );
  await s.untilOpen(0);
  t.pass('both gave their slots back');
});

t.test("traffic either way keeps a stream open past the timeout: the client's, the guest's, datagrams", async (t) => {
  const timeoutMs = 12 * TALK_EVERY_MS;
  const s = await serve(t, { streamingIdleTimeoutMs: timeoutMs });
  const typing = stream(await open(s.port, 'testvm/portforward/24/tcp'));
  const listening = stream(await open(s.port, 'testvm/portforward/25/tcp'));
  const udp = stream(await open(s.port, 'testvm/portforward/53/udp'));
  // Three timeouts' worth of traffic, a tick every twelfth of one, as the talker's.
  for (let tick = 0; tick < TALKS; tick++) {
    typing.ws.send('t');
    udp.ws.send('u');
    await new Promise((r) => setTimeout(r, TALK_EVERY_MS));
  }
  await listening.until(() => Buffer.concat(listening.messages).length === TALKS);
  await udp.until(() => udp.messages.length === TALKS);
  t.same(
    [typing.ws.readyState, listening.ws.readyState, udp.ws.readyState],
    [WebSocket.OPEN, WebSocket.OPEN, WebSocket.OPEN],
    'all three outlived the timeout three times over',
  );
  t.same(
    [await typing.reason, await listening.reason, await udp.reason],
    Array(3).fill(IDLE(timeoutMs)),
    'and were closed once the traffic stopped',
  );
});

t.test('over a cap a stream is refused with 429 naming it, before the guest is reached', async (t) => {
  const s = await serve(t, { sessionLimits: { perNode: 5, perUser: 1 } });
  const held = stream(await open(s.port, 'testvm/portforward/22/tcp'));
  const refused = await open(s.port, 'testvm/portforward/53/udp');
  if ('ws' in refused) throw new Error('the stream was opened');
  t.match(
    { status: refused.status, body: JSON.parse(refused.body) as unknown },
    {
      status: 429,
      body: {
        kind: 'Status',
        reason: 'TooManyRequests',
        code: 429,
        message: /^too many streaming sessions for user "editor" on node n1 \(limit 1, --max-streaming-sessions-per-user\)/,
      },
    },
  );
  held.ws.close(1000);
  await s.untilOpen(0);
  const again = stream(await open(s.port, 'testvm/portforward/53/udp'));
  again.ws.send('back');
  await again.until(() => again.messages.length === 1);
  t.equal(again.messages[0]?.toString(), 'echo:back', 'a closed stream gives its slot back');
});

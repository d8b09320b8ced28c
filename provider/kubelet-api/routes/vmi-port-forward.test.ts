// The node's VMI port-forward over a real listening kubelet API (plain HTTP,
// bearer tokens) with a fake VM access whose ports are local TCP and UDP echo
// servers: bytes and datagrams through, the SubjectAccessReview it sends,
// and refusals before the upgrade.
import { createSocket } from 'node:dgram';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { WebSocket } from 'ws';
import { createAgentMetrics } from '../../metrics.js';
import type { AuthBackend, ResourceAttributes, UserInfo } from '../auth.js';
import { BadRequestError, NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
import type { VmAccess } from '../vm-access.js';
import { forwardTarget } from './vmi-port-forward.js';

const VMI = '/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances';

/** Guest ports: TCP 22 and UDP 53 echo; nothing listens on TCP 23. */
async function guest(t: Test) {
  const sockets = new Set<Socket>();
  const tcp = createServer({ allowHalfOpen: true }, (s) => {
    sockets.add(s);
    s.pipe(s);
  });
  await new Promise<void>((resolve) => tcp.listen(0, '127.0.0.1', resolve));
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
    tcp.close();
    udp.close();
  });
  return {
    tcp: { 22: (tcp.address() as AddressInfo).port, 23: refused } as Record<number, number>,
    udp: (udp.address() as AddressInfo).port,
  };
}

async function serve(t: Test) {
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
  const app = await buildKubeletApi({ nodeName: 'n1', backend, listPods: () => [], log: pino({ level: 'silent' }), vms, metrics });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  return { port: (app.server.address() as AddressInfo).port, sars };
}

interface Stream {
  ws: WebSocket;
  messages: Buffer[];
  until(ok: () => boolean): Promise<void>;
  closed: Promise<number>;
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
    ws.once('open', () =>
      resolve({
        ws,
        messages,
        closed,
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

// The node's VMI subresources over a real listening kubelet API (plain HTTP,
// bearer tokens) with a fake VM access: the console as plain.kubevirt.io
// (bytes through, a second session displacing the first, the streaming caps
// and the idle timeout), the SAR each route sends, the guest agent's lists in
// KubeVirt's shapes, and refusals.
import { Duplex } from 'node:stream';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { WebSocket } from 'ws';
import { createAgentMetrics } from '../../metrics.js';
import type { AuthBackend, ResourceAttributes, UserInfo } from '../auth.js';
import { BadRequestError, ConflictError, NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
import type { SessionLimits } from '../session-limiter.js';
import type { PodRef, VmAccess } from '../vm-access.js';

/** A console that echoes its input, as a terminal does. */
function echoConsole(): Duplex {
  return new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, callback) {
      this.push(chunk);
      callback();
    },
    final(callback) {
      this.push(null);
      callback();
    },
  });
}

/** A console that swallows its input and says what the test pushes. */
function quietConsole(): Duplex {
  return new Duplex({
    read() {},
    write(_chunk, _encoding, callback) {
      callback();
    },
  });
}

const users: Record<string, UserInfo> = Object.fromEntries(
  ['editor', 'editor2', 'editor3', 'viewer'].map((username) => [username, { username, groups: [] }]),
);

async function serve(t: Test, opts: { sessionLimits?: SessionLimits; streamingIdleTimeoutMs?: number } = {}) {
  const sars: ResourceAttributes[] = [];
  const backend: AuthBackend = {
    reviewToken: async (token) => users[token] ?? null,
    async authorize(user, attrs) {
      sars.push(attrs);
      const viewable = ['guestosinfo', 'userlist', 'filesystemlist'].includes(attrs.subresource ?? '');
      return user.username.startsWith('editor') || viewable ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
    },
  };
  const reboots: string[] = [];
  /** The consoles of the quiet VMIs, by VMI name. */
  const quiet = new Map<string, Duplex>();
  const vm = (ref: PodRef) => {
    if (ref.name !== 'virt-launcher-testvm-abcde') throw new NotFoundError(`pod ${ref.name} not found`);
  };
  const vms: VmAccess = {
    vmiPod(namespace, name) {
      if (name === 'stopped') return { namespace, name: 'virt-launcher-stopped-x', container: 'compute', vmiUid: 'uid-stopped' };
      if (name.startsWith('quiet')) return { namespace, name: `virt-launcher-${name}`, container: 'compute', vmiUid: `uid-${name}` };
      if (name !== 'testvm') throw new NotFoundError(`virtualmachineinstance ${namespace}/${name} has no launcher pod on this node`);
      return { namespace, name: 'virt-launcher-testvm-abcde', container: 'compute', vmiUid: 'uid-testvm' };
    },
    async attachConsole(ref) {
      if (ref.name === 'virt-launcher-stopped-x') throw new BadRequestError('the VM of pod tenant/virt-launcher-stopped-x is not running');
      if (ref.name.startsWith('virt-launcher-quiet')) {
        const console = quietConsole();
        quiet.set(ref.name.slice('virt-launcher-'.length), console);
        return console;
      }
      vm(ref);
      return echoConsole();
    },
    async guestUsers(ref) {
      vm(ref);
      return [{ name: 'root', loginTimeS: 1732420000.5 }];
    },
    async guestFilesystems(ref) {
      vm(ref);
      return [{ diskName: 'vdc', mountPoint: '/mnt', type: 'iso9660', usedBytes: 4096, totalBytes: 4096, disks: [{ busType: 'virtio' }] }];
    },
    async guestInfo(ref) {
      vm(ref);
      return {
        agent: {
          agentVersion: '7.2.19',
          supportedCommands: [
            { name: 'guest-ping', enabled: true },
            { name: 'guest-exec', enabled: false },
          ],
          hostname: 'vkvm-guest',
          timezone: 'UTC, 0',
        },
        os: { kernelRelease: '6.1.0-56-amd64', machine: 'x86_64' },
        users: [],
        filesystems: [],
      };
    },
    async softReboot(ref) {
      vm(ref);
      if (reboots.length > 0) throw new ConflictError('cannot reboot: the VM is paused');
      reboots.push(ref.name);
    },
    guestExec: () => Promise.reject(new Error('unused')),
    consoleLogPath: () => Promise.reject(new Error('unused')),
    podPorts: () => Promise.reject(new Error('unused')),
    vncDisplay: () => Promise.reject(new Error('unused')),
    listVmUsage: async () => [],
  };
  const metrics = createAgentMetrics();
  const app = await buildKubeletApi({ nodeName: 'n1', backend, listPods: () => [], log: pino({ level: 'silent' }), vms, metrics, ...opts });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  const base = `127.0.0.1:${port}/apis/subresources.kubevirt.io/v1/namespaces/tenant/virtualmachineinstances`;
  const http = async (method: string, path: string, token?: string) => {
    const res = await fetch(`http://${base}/${path}`, { method, headers: token ? { Authorization: `Bearer ${token}` } : {} });
    const text = await res.text();
    return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? (JSON.parse(text) as unknown) : text };
  };
  const openSessions = async () => (await metrics.streamingSessions.get()).values.reduce((sum, v) => sum + v.value, 0);
  /** Waits until `n` sessions are open (slots are released as connections close). */
  const untilOpen = async (n: number) => {
    const deadline = Date.now() + 10_000;
    while ((await openSessions()) !== n) {
      if (Date.now() > deadline) throw new Error(`${await openSessions()} sessions open, not ${n}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  return { sars, reboots, quiet, base, http, untilOpen };
}

interface Console {
  ws: WebSocket;
  received: () => string;
  closed: Promise<number>;
  /** The close frame's reason. */
  reason: Promise<string>;
}

/** Opens a console; resolves once the upgrade is answered, with the session or the HTTP refusal. */
function openConsole(
  base: string,
  vmi: string,
  token?: string,
  protocol = 'plain.kubevirt.io',
): Promise<Console | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`ws://${base}/${vmi}/console`, [protocol], token ? { headers: { Authorization: `Bearer ${token}` } } : {});
    let received = '';
    ws.on('message', (data: Buffer) => (received += data.toString()));
    const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
    const reason = new Promise<string>((r) => ws.on('close', (_code, why: Buffer) => r(why.toString())));
    ws.once('open', () => resolve({ ws, received: () => received, closed, reason }));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.once('error', reject);
  });
}

async function until(what: string, ok: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`no ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

t.test('the console relays raw bytes in binary messages; a second session closes the first', async (t) => {
  const s = await serve(t);
  const first = await openConsole(s.base, 'testvm', 'editor');
  if (!('ws' in first)) return t.fail(`console refused: ${JSON.stringify(first)}`);
  t.equal(first.ws.protocol, 'plain.kubevirt.io', 'the plain subprotocol was chosen');
  first.ws.send(Buffer.from('echo hi\r'));
  await until('echo', () => first.received() === 'echo hi\r');
  t.same(
    s.sars,
    [
      {
        verb: 'get',
        group: 'subresources.kubevirt.io',
        resource: 'virtualmachineinstances',
        subresource: 'console',
        namespace: 'tenant',
        name: 'testvm',
      },
    ],
    'authorized as get virtualmachineinstances/console on the VMI, not as a node subresource',
  );
  const second = await openConsole(s.base, 'testvm', 'editor');
  if (!('ws' in second)) return t.fail('second console refused');
  t.equal(await first.closed, 1000, 'the first session was closed normally');
  second.ws.send('again');
  await until('echo on the second session', () => second.received() === 'again');
  second.ws.close(1000);
  t.equal(await second.closed, 1000, 'the second session ends when its client closes');
});

t.test('console refusals: no credentials 401, no grant 403, no subprotocol or a VM not running 400, unknown VMI 404', async (t) => {
  const s = await serve(t);
  t.match(
    {
      anonymous: await openConsole(s.base, 'testvm'),
      viewer: await openConsole(s.base, 'testvm', 'viewer'),
      channelProtocol: await openConsole(s.base, 'testvm', 'editor', 'v4.channel.k8s.io'),
      stopped: await openConsole(s.base, 'stopped', 'editor'),
      unknown: await openConsole(s.base, 'nosuch', 'editor'),
    },
    {
      anonymous: { status: 401 },
      viewer: {
        status: 403,
        body: /user=viewer, verb=get, resource=virtualmachineinstances, subresource=console, namespace=tenant/,
      },
      channelProtocol: { status: 400, body: /plain\.kubevirt\.io/ },
      stopped: { status: 400, body: /not running/ },
      unknown: { status: 404, body: /tenant\/nosuch/ },
    },
  );
});

t.test('guestosinfo, userlist and filesystemlist answer in KubeVirt shapes; softreboot is update and 202, a refused one 409', async (t) => {
  const s = await serve(t);
  t.same(
    {
      info: await s.http('GET', 'testvm/guestosinfo', 'viewer'),
      users: await s.http('GET', 'testvm/userlist', 'viewer'),
      filesystems: await s.http('GET', 'testvm/filesystemlist', 'viewer'),
      viewerReboot: (await s.http('PUT', 'testvm/softreboot', 'viewer')).status,
      reboot: (await s.http('PUT', 'testvm/softreboot', 'editor')).status,
      again: await s.http('PUT', 'testvm/softreboot', 'editor'),
    },
    {
      info: {
        status: 200,
        body: {
          guestAgentVersion: '7.2.19',
          supportedCommands: [{ name: 'guest-ping', enabled: true }, { name: 'guest-exec' }],
          hostname: 'vkvm-guest',
          os: { kernelRelease: '6.1.0-56-amd64', machine: 'x86_64' },
          timezone: 'UTC, 0',
          fsInfo: { disks: [] },
        },
      },
      users: { status: 200, body: { metadata: {}, items: [{ userName: 'root', loginTime: 1732420000.5 }] } },
      filesystems: {
        status: 200,
        body: {
          metadata: {},
          items: [
            {
              diskName: 'vdc',
              mountPoint: '/mnt',
              fileSystemType: 'iso9660',
              usedBytes: 4096,
              totalBytes: 4096,
              disk: [{ busType: 'virtio' }],
            },
          ],
        },
      },
      viewerReboot: 403,
      reboot: 202,
      again: { status: 409, body: 'cannot reboot: the VM is paused' },
    },
  );
  t.same(s.reboots, ['virt-launcher-testvm-abcde'], 'one reboot reached the VM');
  t.match(
    s.sars.filter((a) => a.subresource === 'softreboot'),
    [{ verb: 'update' }, { verb: 'update' }],
    "softreboot is authorized as update (the editor's second decision comes from the cache)",
  );
});

const session = (c: Console | { status: number; body: string }): Console => {
  if ('ws' in c) return c;
  throw new Error(`console refused: ${c.status} ${c.body}`);
};

t.test('over a cap a console is refused with 429 naming it, and the open console is not displaced', async (t) => {
  const s = await serve(t, { sessionLimits: { perNode: 2, perUser: 1 } });
  const first = session(await openConsole(s.base, 'testvm', 'editor'));
  const overUser = await openConsole(s.base, 'testvm', 'editor');
  session(await openConsole(s.base, 'quiet1', 'editor2'));
  const overNode = await openConsole(s.base, 'quiet2', 'editor3');
  const refusal = (c: Console | { status: number; body: string }) => {
    if ('ws' in c) throw new Error('the console was opened');
    return { status: c.status, body: JSON.parse(c.body) as unknown };
  };
  const status = { kind: 'Status', status: 'Failure', reason: 'TooManyRequests', code: 429 };
  t.match(
    { overUser: refusal(overUser), overNode: refusal(overNode) },
    {
      overUser: {
        status: 429,
        body: {
          ...status,
          message: /^too many streaming sessions for user "editor" on node n1 \(limit 1, --max-streaming-sessions-per-user\)/,
        },
      },
      overNode: {
        status: 429,
        body: { ...status, message: /^too many streaming sessions on node n1 \(limit 2, --max-streaming-sessions\)/ },
      },
    },
  );
  first.ws.send('still here');
  await until('echo on the first session', () => first.received() === 'still here');
  t.same([...s.quiet.keys()], ['quiet1'], 'the refused console over the node cap attached to nothing');
  first.ws.close(1000);
  await s.untilOpen(1);
  t.ok('ws' in (await openConsole(s.base, 'testvm', 'editor')), 'a closed console gives its slot back');
});

t.test('a console without traffic either way is closed with the idle message, and detached', async (t) => {
  const s = await serve(t, { streamingIdleTimeoutMs: 100 });
  const c = session(await openConsole(s.base, 'quiet', 'editor'));
  t.same(
    { code: await c.closed, reason: await c.reason },
    { code: 1000, reason: 'session closed after 100ms without traffic (--streaming-connection-idle-timeout)' },
  );
  await s.untilOpen(0);
  t.equal(s.quiet.get('quiet')?.destroyed, true, 'the serial console was let go');
});

t.test("traffic in either direction keeps a console open: the client's input, the guest's output", async (t) => {
  const timeoutMs = 600;
  const s = await serve(t, { streamingIdleTimeoutMs: timeoutMs });
  const typing = session(await openConsole(s.base, 'quiet-in', 'editor'));
  const watching = session(await openConsole(s.base, 'quiet-out', 'editor'));
  const output = s.quiet.get('quiet-out')!;
  // Three timeouts' worth of traffic, a tick every twelfth of one.
  for (let tick = 0; tick < 36; tick++) {
    typing.ws.send('k');
    output.push('o');
    await new Promise((r) => setTimeout(r, timeoutMs / 12));
  }
  await until('the output', () => watching.received().length === 36);
  t.same(
    { typing: typing.ws.readyState, watching: watching.ws.readyState },
    { typing: WebSocket.OPEN, watching: WebSocket.OPEN },
    'both consoles outlived the timeout three times over',
  );
  t.same(
    [await typing.reason, await watching.reason],
    Array(2).fill(`session closed after ${timeoutMs}ms without traffic (--streaming-connection-idle-timeout)`),
    'and were closed once the traffic stopped',
  );
});

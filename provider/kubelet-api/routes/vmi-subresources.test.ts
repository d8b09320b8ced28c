// The node's VMI subresources over a real listening kubelet API (plain HTTP,
// bearer tokens) with a fake VM access: the console as plain.kubevirt.io
// (bytes through, a second session displacing the first), the SAR each route
// sends, the guest agent's lists in KubeVirt's shapes, and refusals.
import { Duplex } from 'node:stream';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { WebSocket } from 'ws';
import type { AuthBackend, ResourceAttributes, UserInfo } from '../auth.js';
import { BadRequestError, ConflictError, NotFoundError } from '../errors.js';
import { buildKubeletApi } from '../server.js';
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

const users: Record<string, UserInfo> = { editor: { username: 'editor', groups: [] }, viewer: { username: 'viewer', groups: [] } };

async function serve(t: Test) {
  const sars: ResourceAttributes[] = [];
  const backend: AuthBackend = {
    reviewToken: async (token) => users[token] ?? null,
    async authorize(user, attrs) {
      sars.push(attrs);
      const viewable = ['guestosinfo', 'userlist', 'filesystemlist'].includes(attrs.subresource ?? '');
      return user.username === 'editor' || viewable ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
    },
  };
  const reboots: string[] = [];
  const vm = (ref: PodRef) => {
    if (ref.name !== 'virt-launcher-testvm-abcde') throw new NotFoundError(`pod ${ref.name} not found`);
  };
  const vms: VmAccess = {
    vmiPod(namespace, name) {
      if (name === 'stopped') return { namespace, name: 'virt-launcher-stopped-x', container: 'compute', vmiUid: 'uid-stopped' };
      if (name !== 'testvm') throw new NotFoundError(`virtualmachineinstance ${namespace}/${name} has no launcher pod on this node`);
      return { namespace, name: 'virt-launcher-testvm-abcde', container: 'compute', vmiUid: 'uid-testvm' };
    },
    async attachConsole(ref) {
      if (ref.name === 'virt-launcher-stopped-x') throw new BadRequestError('the VM of pod tenant/virt-launcher-stopped-x is not running');
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
  const app = await buildKubeletApi({ nodeName: 'n1', backend, listPods: () => [], log: pino({ level: 'silent' }), vms });
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
  return { sars, reboots, base, http };
}

interface Console {
  ws: WebSocket;
  received: () => string;
  closed: Promise<number>;
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
    ws.once('open', () => resolve({ ws, received: () => received, closed }));
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

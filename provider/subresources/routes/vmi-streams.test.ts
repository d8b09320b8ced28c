// The console path end to end without a cluster: a client (as the aggregator
// reaches the subresource API: front-proxy certificate, X-Remote-User) opens
// a plain.kubevirt.io WebSocket; the subresource API checks the VMI and
// proxies the upgrade to the node's kubelet API over TLS (the cluster CA, a
// bearer token), which authorizes its own caller for the same VMI
// subresource and serves the console. Also the guest agent's lists and the
// refusals KubeVirt gives.
import { webcrypto } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { connect, createServer, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import 'reflect-metadata';
import { KubeConfig, type V1Node } from '@kubernetes/client-node';
import * as x509 from '@peculiar/x509';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { WebSocket } from 'ws';
import { EC, issue, newCa, type TestCa } from '../../../test/helpers/fake-ca.js';
import type { ResourceAttributes as NodeSar } from '../../kubelet-api/auth.js';
import { buildKubeletApi } from '../../kubelet-api/server.js';
import type { VmAccess } from '../../kubelet-api/vm-access.js';
import type { KubeClients } from '../../kube/client.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachine, VirtualMachineInstance, VmiPhase } from '../../kubevirt/types.js';
import { Instancetypes } from '../../controllers/instancetypes.js';
import { FakeInstancetypeStore } from '../../../test/helpers/fake-instancetype-store.js';
import { buildSubresourceApi } from '../server.js';
import { selfSignedCert } from '../serving-cert.js';
import { VmiNodeClient } from '../vmi-node.js';

const VMI_PATH = '/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances';
const CONTROLLERS_TOKEN = 'controllers-token';

async function certFor(ca: TestCa, cn: string, sans: x509.Extension[] = []) {
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const now = Date.now();
  const certPem = await issue(
    ca,
    keys.publicKey as unknown as x509.PublicKeyType,
    `CN=${cn}`,
    new Date(now - 60_000),
    new Date(now + 3600_000),
    sans,
  );
  const keyPem = x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  return { certPem, keyPem };
}

const echo = (): Duplex =>
  new Duplex({
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

const vmi = (name: string, phase: VmiPhase): VirtualMachineInstance => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachineInstance',
  metadata: { name, namespace: 'ns', uid: `uid-${name}` },
  spec: { domain: {} },
  status: { phase, nodeName: 'n1', conditions: [{ type: 'AgentConnected', status: 'True' }] },
});

/** A local TCP server standing in for a guest port (echo) or a VNC display (greets as RFB, then echoes). */
async function guestServer(t: Test, greeting = ''): Promise<number> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.write(greeting);
    s.pipe(s);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

const dial = (port: number): Promise<Socket> =>
  new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
    s.once('error', reject);
    s.once('connect', () => resolve(s));
  });

async function serve(t: Test) {
  // The node: its kubelet API over TLS, certificate from the cluster CA for its address.
  const clusterCa = await newCa();
  const nodeSars: NodeSar[] = [];
  const [sshPort, vncPort] = await Promise.all([guestServer(t), guestServer(t, 'RFB 003.008\n')]);
  const vms: VmAccess = {
    vmiPod: (namespace, name) => ({ namespace, name: `virt-launcher-${name}`, container: 'compute', vmiUid: `uid-${name}` }),
    attachConsole: async () => echo(),
    guestUsers: async () => [{ name: 'root', loginTimeS: 5 }],
    guestFilesystems: async () => [],
    guestInfo: async () => ({
      agent: { agentVersion: '7.2', supportedCommands: [], hostname: 'g', timezone: '' },
      users: [],
      filesystems: [],
    }),
    softReboot: async () => {},
    guestExec: () => Promise.reject(new Error('unused')),
    consoleLogPath: () => Promise.reject(new Error('unused')),
    podPorts: async () => ({
      uid: 'pod-uid',
      connect: (port) => (port === 22 ? dial(sshPort) : Promise.reject(new Error('connect ECONNREFUSED'))),
      connectUdp: () => Promise.reject(new Error('unused')),
    }),
    vncDisplay: async () => ({ uid: 'pod-uid', connect: () => dial(vncPort) }),
    listVmUsage: async () => [],
  };
  const nodeTls = await certFor(clusterCa, 'system:node:n1', [
    new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }]),
  ]);
  const node = await buildKubeletApi({
    nodeName: 'n1',
    backend: {
      reviewToken: async (token) =>
        token === CONTROLLERS_TOKEN ? { username: 'system:serviceaccount:kube-system:vkvm-controllers', groups: [] } : null,
      authorize: async (_user, attrs) => (nodeSars.push(attrs), { allowed: true }),
    },
    tls: { ...nodeTls, clientCaPem: clusterCa.pem },
    listPods: () => [],
    vms,
    log: pino({ level: 'silent' }),
  });
  await node.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => node.close());
  const kubeletPort = (node.server.address() as AddressInfo).port;

  // The subresource API, with a kubeconfig naming the cluster CA and its token.
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: 'https://127.0.0.1:1', caData: Buffer.from(clusterCa.pem).toString('base64') }],
    users: [{ name: 'u', token: CONTROLLERS_TOKEN }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  const nodeObject: V1Node = {
    metadata: { name: 'n1' },
    status: { addresses: [{ type: 'InternalIP', address: '127.0.0.1' }], daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } } },
  };
  const paused = vmi('paused', 'Running');
  paused.status!.conditions!.push({ type: 'Paused', status: 'True' });
  const headless = vmi('headless', 'Running');
  headless.spec.domain!.devices = { autoattachGraphicsDevice: false };
  const owned = vmi('testvm', 'Running');
  owned.metadata.ownerReferences = [
    { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: 'testvm', uid: 'vm-uid', controller: true },
  ];
  const vms_: Record<string, VirtualMachine> = {
    testvm: {
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachine',
      metadata: { name: 'testvm', uid: 'vm-uid' },
      spec: { template: { spec: { domain: {} } } },
      status: { created: true },
    },
    halted: {
      apiVersion: 'kubevirt.io/v1',
      kind: 'VirtualMachine',
      metadata: { name: 'halted', uid: 'halted-uid' },
      spec: { template: { spec: { domain: {} } } },
      status: {},
    },
  };
  const vmis: Record<string, VirtualMachineInstance> = {
    testvm: owned,
    paused,
    headless,
    pending: vmi('pending', 'Scheduling'),
    failed: vmi('failed', 'Failed'),
  };
  const proxyCa = await newCa();
  const api = await buildSubresourceApi({
    requestHeader: {
      clientCaPem: proxyCa.pem,
      allowedNames: [],
      usernameHeaders: ['X-Remote-User'],
      groupHeaders: ['X-Remote-Group'],
      extraHeaderPrefixes: [],
    },
    authorizer: { authorize: async (user) => ({ allowed: user.username === 'alice' }) },
    instancetypes: new Instancetypes(new FakeInstancetypeStore()),
    kubevirt: {
      getVmi: async (_ns: string, name: string) => vmis[name] ?? Promise.reject(Object.assign(new Error('not found'), { code: 404 })),
      getVm: async (_ns: string, name: string) => vms_[name] ?? Promise.reject(Object.assign(new Error('not found'), { code: 404 })),
    } as unknown as KubevirtApi,
    clients: {} as KubeClients,
    nodes: new VmiNodeClient(kc, async () => nodeObject),
    events: { record: () => undefined, recordFor: () => undefined },
    evictionStrategy: 'None',
    tls: await selfSignedCert('vkvm-subresources.kube-system.svc'),
    log: pino({ level: 'silent' }),
  });
  await api.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => api.close());
  const proxyCert = await certFor(proxyCa, 'front-proxy-client');
  const port = (api.server.address() as AddressInfo).port;
  const base = `wss://127.0.0.1:${port}${VMI_PATH}`;
  const tlsAsProxy = { cert: proxyCert.certPem, key: proxyCert.keyPem, rejectUnauthorized: false };
  return { base, nodeSars, tlsAsProxy, port };
}

interface Session {
  ws: WebSocket;
  received: () => string;
  closed: Promise<number>;
}

function openConsole(
  s: Awaited<ReturnType<typeof serve>>,
  name: string,
  user = 'alice',
  path = `${s.base}/${name}/console`,
): Promise<Session | { status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(path, ['plain.kubevirt.io'], { ...s.tlsAsProxy, headers: { 'X-Remote-User': user } });
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

t.test("the console reaches the node's kubelet API, authorized there for the VMI; a second session displaces the first", async (t) => {
  const s = await serve(t);
  const first = await openConsole(s, 'testvm');
  if (!('ws' in first)) return t.fail(`refused: ${JSON.stringify(first)}`);
  t.equal(first.ws.protocol, 'plain.kubevirt.io', "the node's subprotocol choice reached the client");
  first.ws.send(Buffer.from('uname\r'));
  await until('echo through both hops', () => first.received() === 'uname\r');
  t.same(
    s.nodeSars,
    [
      {
        verb: 'get',
        group: 'subresources.kubevirt.io',
        resource: 'virtualmachineinstances',
        subresource: 'console',
        namespace: 'ns',
        name: 'testvm',
      },
    ],
    "the node authorized the subresource API's identity for this VMI's console",
  );
  const second = await openConsole(s, 'testvm');
  if (!('ws' in second)) return t.fail('second session refused');
  t.equal(await first.closed, 1000, 'the first session was closed normally');
  second.ws.send('again');
  await until('echo on the second session', () => second.received() === 'again');
  second.ws.close(1000);
  await second.closed;
});

t.test('KubeVirt refusals: not running 400 (virtctl retries), Failed 409, unknown 404, no grant 403', async (t) => {
  const s = await serve(t);
  t.match(
    {
      pending: await openConsole(s, 'pending'),
      failed: await openConsole(s, 'failed'),
      unknown: await openConsole(s, 'nosuch'),
      bob: await openConsole(s, 'testvm', 'bob'),
    },
    {
      pending: { status: 400, body: /"message":"VMI is not running"/ },
      failed: {
        status: 409,
        body: /Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \\"failed\\": VMI is in failed status/,
      },
      unknown: { status: 404, body: /virtualmachineinstance.kubevirt.io \\"nosuch\\" not found/ },
      bob: { status: 403, body: /User \\"bob\\" cannot get resource \\"virtualmachineinstances\/console\\"/ },
    },
  );
  t.same(s.nodeSars, [], 'nothing reached the node');
});

t.test("guestosinfo and userlist are the node's answers, passed through", async (t) => {
  const s = await serve(t);
  t.same(
    { info: await fetchJson(s, 'testvm/guestosinfo'), users: await fetchJson(s, 'testvm/userlist') },
    {
      info: { status: 200, body: { guestAgentVersion: '7.2', hostname: 'g', os: {}, fsInfo: { disks: [] } } },
      users: { status: 200, body: { metadata: {}, items: [{ userName: 'root', loginTime: 5 }] } },
    },
  );
});

async function fetchJson(s: Awaited<ReturnType<typeof serve>>, path: string): Promise<{ status: number; body: unknown }> {
  const { request } = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: s.port, path: `${VMI_PATH}/${path}`, headers: { 'X-Remote-User': 'alice' }, ...s.tlsAsProxy },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as unknown }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

const VM_PATH = '/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines';

t.test(
  'portforward reaches the guest port through the node, for a VMI and for a VM; the node authorizes the VMI portforward',
  async (t) => {
    const s = await serve(t);
    const viaVmi = await openConsole(s, 'testvm', 'alice', `${s.base}/testvm/portforward/22/tcp`);
    const viaVm = await openConsole(s, 'testvm', 'alice', `wss://127.0.0.1:${s.port}${VM_PATH}/testvm/portforward/22`);
    if (!('ws' in viaVmi) || !('ws' in viaVm)) return t.fail(`refused: ${JSON.stringify([viaVmi, viaVm])}`);
    viaVmi.ws.send(Buffer.from('SSH-2.0-vmi\r\n'));
    viaVm.ws.send(Buffer.from('SSH-2.0-vm\r\n'));
    await until('echo through both hops', () => viaVmi.received() === 'SSH-2.0-vmi\r\n' && viaVm.received() === 'SSH-2.0-vm\r\n');
    viaVmi.ws.close(1000);
    viaVm.ws.close(1000);
    await Promise.all([viaVmi.closed, viaVm.closed]);
    t.same(
      [...new Set(s.nodeSars.map((a) => `${a.resource}/${a.subresource} ${a.name}`))],
      ['virtualmachineinstances/portforward testvm'],
      'both asked the node for the VMI portforward (one decision, cached)',
    );
  },
);

t.test('vnc: the RFB greeting through both hops; preserveSession=true while a session is open is 503, as the node answers', async (t) => {
  const s = await serve(t);
  const first = await openConsole(s, 'testvm', 'alice', `${s.base}/testvm/vnc`);
  if (!('ws' in first)) return t.fail(`refused: ${JSON.stringify(first)}`);
  await until('the greeting', () => first.received() === 'RFB 003.008\n');
  const kept = await openConsole(s, 'testvm', 'alice', `${s.base}/testvm/vnc?preserveSession=true`);
  t.match(kept, { status: 503, body: /in use by another session.*"reason":"ServiceUnavailable"/ });
  const second = await openConsole(s, 'testvm', 'alice', `${s.base}/testvm/vnc`);
  if (!('ws' in second)) return t.fail('a second session without preserveSession was refused');
  t.equal(await first.closed, 1000, 'the first session was closed for the second');
  second.ws.close(1000);
  await second.closed;
  t.same(
    [...new Set(s.nodeSars.map((a) => `${a.resource}/${a.subresource}`))],
    ['virtualmachineinstances/vnc'],
    "the node authorized the subresource API's identity for this VMI's vnc",
  );
});

t.test("KubeVirt's refusals for vnc and portforward, before anything reaches the node", async (t) => {
  const s = await serve(t);
  const at = (path: string) => openConsole(s, 'testvm', 'alice', path);
  t.match(
    {
      headless: await at(`${s.base}/headless/vnc`),
      pending: await at(`${s.base}/pending/vnc`),
      paused: await at(`${s.base}/paused/portforward/22/tcp`),
      badPort: await at(`${s.base}/testvm/portforward/0/tcp`),
      badProtocol: await at(`${s.base}/testvm/portforward/22/sctp`),
      halted: await at(`wss://127.0.0.1:${s.port}${VM_PATH}/halted/portforward/22/tcp`),
      noVm: await at(`wss://127.0.0.1:${s.port}${VM_PATH}/nosuch/portforward/22/tcp`),
      bob: await openConsole(s, 'testvm', 'bob', `${s.base}/testvm/portforward/22/tcp`),
    },
    {
      headless: { status: 400, body: /"message":"No graphics devices are present."/ },
      pending: { status: 400, body: /Unable to connect to VM because phase is Scheduling instead of Running/ },
      paused: { status: 409, body: /VMI is paused/ },
      badPort: { status: 400, body: /port \\"0\\" must be a number from 1 to 65535/ },
      badProtocol: { status: 400, body: /protocol \\"sctp\\" must be tcp or udp/ },
      halted: { status: 409, body: /VMI is not started/ },
      noVm: { status: 404, body: /virtualmachine.kubevirt.io \\"nosuch\\" not found/ },
      bob: { status: 403, body: /cannot get resource \\"virtualmachineinstances\/portforward\\"/ },
    },
  );
  t.same(s.nodeSars, [], 'nothing reached the node');
});

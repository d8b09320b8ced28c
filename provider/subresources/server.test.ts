// The subresource API over real TLS, as the aggregator reaches it: a front-proxy
// client certificate from the requestheader CA, identity in X-Remote-* headers.
import { request } from 'node:https';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { pino } from 'pino';
import { KubeConfig } from '@kubernetes/client-node';
import { clientCert, newCa } from '../../test/helpers/fake-ca.js';
import type { KubeClients } from '../kube/client.js';
import type { KubevirtApi } from '../kubevirt/client.js';
import type { VirtualMachine } from '../kubevirt/types.js';
import type { ResourceAttributes } from './auth.js';
import { buildSubresourceApi } from './server.js';
import { VmiNodeClient } from './vmi-node.js';
import { selfSignedCert } from './serving-cert.js';
import { Instancetypes } from '../controllers/instancetypes.js';
import { FakeInstancetypeStore } from '../../test/helpers/fake-instancetype-store.js';

const VM_PATH = '/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines';

async function serve(t: Test) {
  const ca = await newCa();
  const vms: Record<string, VirtualMachine> = {
    halted: {
      metadata: { name: 'halted', namespace: 'ns', uid: 'u1' },
      spec: { runStrategy: 'Halted', template: { spec: { domain: {} } } },
      status: { printableStatus: 'Stopped' },
    },
    ...Object.fromEntries(
      ['running', 'pinned', 'busy'].map((name) => [
        name,
        { metadata: { name, namespace: 'ns' }, spec: { runStrategy: 'Always', template: { spec: { domain: {} } } } },
      ]),
    ),
  };
  const running = (name: string, conditions: object[] = []) => ({
    metadata: { name, namespace: 'ns' },
    status: { phase: 'Running', conditions },
  });
  const vmis: Record<string, unknown> = {
    running: running('running'),
    pinned: running('pinned', [{ type: 'LiveMigratable', status: 'False', reason: 'DisksNotLiveMigratable', message: 'hostDisk' }]),
    busy: running('busy'),
  };
  const vmims = [{ metadata: { name: 'm0', uid: 'uid-m0' }, spec: { vmiName: 'busy' }, status: { phase: 'Scheduling' } }];
  const writes: unknown[] = [];
  const sars: ResourceAttributes[] = [];
  const notFound = () => Object.assign(new Error('not found'), { code: 404 });
  const kubevirt = {
    getVm: async (_ns: string, name: string) => vms[name] ?? Promise.reject(notFound()),
    getVmi: async (_ns: string, name: string) => vmis[name] ?? Promise.reject(notFound()),
    listVmims: async () => ({ items: vmims }),
    createVmim: async (...args: unknown[]) => {
      writes.push(args);
      return { metadata: { name: 'kubevirt-migrate-vm-abcde' } };
    },
    patch: async (...args: unknown[]) => void writes.push(args),
    jsonPatchStatus: async (...args: unknown[]) => void writes.push(args),
  } as unknown as KubevirtApi;
  const store = new FakeInstancetypeStore();
  store.put('VirtualMachineClusterInstancetype', '', 'u1.small', { cpu: { guest: 1 }, memory: { guest: '2Gi' } });
  store.put('VirtualMachineClusterPreference', '', 'fedora', { devices: { preferredDiskBus: 'virtio' } });
  const app = await buildSubresourceApi({
    requestHeader: {
      clientCaPem: ca.pem,
      allowedNames: ['front-proxy-client'],
      usernameHeaders: ['X-Remote-User'],
      groupHeaders: ['X-Remote-Group'],
      extraHeaderPrefixes: ['X-Remote-Extra-'],
    },
    authorizer: {
      async authorize(user, attrs) {
        sars.push(attrs);
        return user.username === 'viewer' ? { allowed: false, reason: 'no RBAC rule' } : { allowed: true };
      },
    },
    kubevirt,
    instancetypes: new Instancetypes(store),
    clients: {} as KubeClients,
    nodes: new VmiNodeClient(new KubeConfig(), () => Promise.reject(new Error('no nodes here'))),
    events: { record: () => undefined, recordFor: () => undefined },
    evictionStrategy: 'None',
    tls: await selfSignedCert('vkvm-subresources.kube-system.svc'),
    log: pino({ level: 'silent' }),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  const proxy = await clientCert(ca, 'front-proxy-client');
  const call = (method: string, path: string, opts: { cert?: { cert: string; key: string }; user?: string; body?: string } = {}) =>
    new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
      const headers: Record<string, string | string[]> = { 'Content-Type': 'application/json' };
      if (opts.user) Object.assign(headers, { 'X-Remote-User': opts.user, 'X-Remote-Group': ['system:authenticated', 'devs'] });
      const req = request({ host: '127.0.0.1', port, method, path, headers, rejectUnauthorized: false, ...(opts.cert ?? {}) }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, body: text.startsWith('{') ? (JSON.parse(text) as Record<string, unknown>) : { text } }),
        );
      });
      req.on('error', reject);
      req.end(opts.body ?? '');
    });
  return {
    call,
    proxy,
    stranger: await clientCert(await newCa(), 'front-proxy-client'),
    other: await clientCert(ca, 'someone-else'),
    writes,
    sars,
  };
}

t.test('only the front proxy, naming a user, is heard: anything else is a 401 Status', async (t) => {
  const { call, proxy, stranger, other } = await serve(t);
  const start = `${VM_PATH}/halted/start`;
  t.match(
    await call('PUT', start, { user: 'alice' }),
    { status: 401, body: { kind: 'Status', code: 401, reason: 'Unauthorized' } },
    'no client certificate',
  );
  t.match(await call('PUT', start, { cert: stranger, user: 'alice' }), { status: 401 }, 'a certificate from another CA');
  t.match(await call('PUT', start, { cert: other, user: 'alice' }), { status: 401 }, 'a CN that is not an allowed proxy');
  t.match(await call('PUT', start, { cert: proxy }), { status: 401 }, 'no X-Remote-User');
  t.match(await call('GET', '/healthz'), { status: 200 }, 'health needs nothing');
});

t.test('each request is authorized by SubjectAccessReview on the subresource', async (t) => {
  const { call, proxy, sars, writes } = await serve(t);
  t.match(
    await call('PUT', `${VM_PATH}/halted/start`, { cert: proxy, user: 'viewer' }),
    {
      status: 403,
      body: {
        reason: 'Forbidden',
        message:
          /User "viewer" cannot update resource "virtualmachines\/start" in API group "subresources.kubevirt.io" in the namespace "ns"/,
      },
    },
    'a user without update on virtualmachines/start',
  );
  t.same(
    sars,
    [{ namespace: 'ns', name: 'halted', verb: 'update', resource: 'virtualmachines', subresource: 'start' }],
    'the review names the subresource',
  );
  t.same(writes, [], 'nothing was written');
});

t.test('start, 404 and discovery', async (t) => {
  const { call, proxy, writes } = await serve(t);
  t.match(
    await call('PUT', `${VM_PATH}/halted/start`, { cert: proxy, user: 'alice', body: '' }),
    { status: 202 },
    'an empty body is no options',
  );
  t.same(writes, [['virtualmachines', 'ns', 'halted', { spec: { runStrategy: 'Always' } }, false]], 'a Halted VM is set to Always');
  t.match(
    await call('PUT', `${VM_PATH}/nosuch/stop`, { cert: proxy, user: 'alice', body: '{"dryRun":["All"]}' }),
    {
      status: 404,
      body: {
        kind: 'Status',
        reason: 'NotFound',
        message: 'virtualmachine.kubevirt.io "nosuch" not found',
        details: { name: 'nosuch', group: 'kubevirt.io', kind: 'virtualmachine' },
      },
    },
    'an unknown VM',
  );
  const discovery = await call('GET', '/apis/subresources.kubevirt.io/v1', { cert: proxy, user: 'alice' });
  t.match(
    discovery,
    {
      status: 200,
      body: {
        kind: 'APIResourceList',
        groupVersion: 'subresources.kubevirt.io/v1',
        resources: [{ name: 'virtualmachines/start', verbs: ['update'] }],
      },
    },
    'the served subresources',
  );
});

t.test(
  'expand: a VM without instance types is its own expansion; one with them comes back expanded, or refused naming the field',
  async (t) => {
    const { call, proxy, sars } = await serve(t);
    const put = (body: unknown) =>
      call('PUT', '/apis/subresources.kubevirt.io/v1/namespaces/ns/expand-vm-spec', {
        cert: proxy,
        user: 'alice',
        body: JSON.stringify(body),
      });
    const vm = { metadata: { name: 'sent' }, spec: { template: { spec: { domain: {} } } } };
    const typed = { ...vm, spec: { ...vm.spec, instancetype: { name: 'u1.small' }, preference: { name: 'fedora' } } };
    t.match(
      {
        stored: await call('GET', `${VM_PATH}/halted/expand-spec`, { cert: proxy, user: 'alice' }),
        sent: await put(vm),
        typed: await put(typed),
        missing: await put({ ...typed, spec: { ...typed.spec, instancetype: { name: 'u9.huge' } } }),
        elsewhere: await put({ ...vm, metadata: { name: 'sent', namespace: 'other' } }),
        noTemplate: await put({ metadata: { name: 'sent' }, spec: {} }),
      },
      {
        stored: { status: 200, body: { metadata: { name: 'halted' }, spec: { runStrategy: 'Halted' } } },
        sent: { status: 200, body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', metadata: { name: 'sent', namespace: 'ns' } } },
        typed: {
          status: 200,
          body: {
            spec: {
              instancetype: undefined,
              preference: undefined,
              template: { spec: { domain: { cpu: { sockets: 1, cores: 1, threads: 1 }, memory: { guest: '2Gi' } } } },
            },
          },
        },
        missing: { status: 400, body: { message: 'spec.instancetype: VirtualMachineClusterInstancetype u9.huge not found' } },
        elsewhere: { status: 400, body: { message: 'VM namespace must be empty or ns' } },
        noTemplate: { status: 400, body: { message: 'Object is not a valid VirtualMachine: spec.template: Required value' } },
      },
    );
    t.match(
      sars[1],
      { namespace: 'ns', verb: 'update', resource: 'expand-vm-spec' },
      'expand-vm-spec is authorized as its own resource, on no object',
    );
    t.notOk('name' in sars[1]! || 'subresource' in sars[1]!, 'no name or subresource in that review');
  },
);

t.test('migrate: a running, migratable VM gets a VMIM named and labelled as virtctl expects; otherwise a Status says why', async (t) => {
  const { call, proxy, sars, writes } = await serve(t);
  const migrate = (name: string, user = 'alice') => call('PUT', `${VM_PATH}/${name}/migrate`, { cert: proxy, user, body: '{}' });
  t.match(
    {
      viewer: await migrate('running', 'viewer'),
      ok: await migrate('running'),
      halted: await migrate('halted'),
      pinned: await migrate('pinned'),
      busy: await migrate('busy'),
    },
    {
      viewer: { status: 403, body: { message: /cannot update resource "virtualmachines\/migrate"/ } },
      ok: { status: 202 },
      halted: { status: 404, body: { message: 'virtualmachineinstance.kubevirt.io "halted" not found' } },
      pinned: { status: 409, body: { message: /Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: hostDisk/ } },
      busy: { status: 409, body: { message: /in-flight migration detected. Active migration job \(uid-m0\)/ } },
    },
  );
  t.same(sars[0], { namespace: 'ns', name: 'running', verb: 'update', resource: 'virtualmachines', subresource: 'migrate' });
  t.same(writes, [
    [
      {
        apiVersion: 'kubevirt.io/v1',
        kind: 'VirtualMachineInstanceMigration',
        metadata: { generateName: 'kubevirt-migrate-vm-', namespace: 'ns', labels: { 'kubevirt.io/vmi-name': 'running' } },
        spec: { vmiName: 'running' },
      },
      false,
    ],
  ]);
});

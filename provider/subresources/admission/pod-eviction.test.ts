// The eviction webhook over real TLS, as the kube-apiserver calls it: with the
// proxy's client certificate (its webhook kubeconfig) and no user headers.
import { Instancetypes } from '../../controllers/instancetypes.js';
import { FakeInstancetypeStore } from '../../../test/helpers/fake-instancetype-store.js';
import { request } from 'node:https';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { pino } from 'pino';
import { KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { clientCert, newCa } from '../../../test/helpers/fake-ca.js';
import type { KubeClients } from '../../kube/client.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstance } from '../../kubevirt/types.js';
import { buildSubresourceApi } from '../server.js';
import { VmiNodeClient } from '../vmi-node.js';
import { selfSignedCert } from '../serving-cert.js';

const launcher = (vmi: string): V1Pod => ({
  metadata: { name: `virt-launcher-${vmi}-x`, namespace: 'ns', labels: { 'kubevirt.io': 'virt-launcher', 'vm.kubevirt.io/name': vmi } },
  spec: { nodeName: 'a', containers: [] },
  status: { phase: 'Running' },
});
const vmi = (name: string, evictionStrategy: string, migratable: boolean): VirtualMachineInstance => ({
  metadata: { name, namespace: 'ns', uid: `uid-${name}` },
  spec: { domain: {}, evictionStrategy: evictionStrategy as never },
  status: {
    phase: 'Running',
    nodeName: 'a',
    conditions: [
      migratable
        ? { type: 'LiveMigratable', status: 'True' }
        : { type: 'LiveMigratable', status: 'False', reason: 'DisksNotLiveMigratable', message: 'hostDisk d1 is not shared' },
    ],
  },
});

t.test('the kube-apiserver asks; LiveMigrate marks the VMI for evacuation, or blocks with an Event; None evicts', async (t) => {
  const ca = await newCa();
  const vmis: Record<string, VirtualMachineInstance> = {
    moving: vmi('moving', 'LiveMigrate', true),
    pinned: vmi('pinned', 'LiveMigrate', false),
    plain: vmi('plain', 'None', true),
  };
  const statusWrites: unknown[] = [];
  const events: string[] = [];
  const notFound = () => Object.assign(new Error('not found'), { code: 404 });
  const app = await buildSubresourceApi({
    requestHeader: {
      clientCaPem: ca.pem,
      allowedNames: ['front-proxy-client'],
      usernameHeaders: ['X-Remote-User'],
      groupHeaders: ['X-Remote-Group'],
      extraHeaderPrefixes: [],
    },
    authorizer: { authorize: async () => ({ allowed: false }) },
    instancetypes: new Instancetypes(new FakeInstancetypeStore()),
    kubevirt: {
      getVmi: async (_ns: string, name: string) => vmis[name] ?? Promise.reject(notFound()),
      patchStatus: async (...args: unknown[]) => void statusWrites.push(args),
    } as unknown as KubevirtApi,
    clients: {
      core: {
        readNamespacedPod: async ({ name }: { name: string }) =>
          name.startsWith('virt-launcher-') ? launcher(name.slice('virt-launcher-'.length, -2)) : Promise.reject(notFound()),
      },
    } as unknown as KubeClients,
    nodes: new VmiNodeClient(new KubeConfig(), () => Promise.reject(new Error('no nodes here'))),
    events: { record: () => undefined, recordFor: (_o, type, reason, message) => void events.push(`${type} ${reason}: ${message}`) },
    evictionStrategy: 'None',
    tls: await selfSignedCert('vkvm-subresources.kube-system.svc'),
    log: pino({ level: 'silent' }),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => app.close());
  const port = (app.server.address() as AddressInfo).port;
  const apiserver = await clientCert(ca, 'front-proxy-client');
  const review = (pod: string, o: { dryRun?: boolean; cert?: { cert: string; key: string } } = {}) =>
    new Promise<{ status: number; body: { response?: object; code?: number } }>((resolve, reject) => {
      const body = JSON.stringify({
        apiVersion: 'admission.k8s.io/v1',
        kind: 'AdmissionReview',
        request: {
          uid: `r-${pod}`,
          name: pod,
          namespace: 'ns',
          operation: 'CREATE',
          dryRun: o.dryRun ?? false,
          object: { kind: 'Eviction' },
        },
      });
      const headers = { 'Content-Type': 'application/json' };
      const req = request(
        { host: '127.0.0.1', port, method: 'POST', path: '/admission/pod-eviction', headers, rejectUnauthorized: false, ...(o.cert ?? {}) },
        (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as { response?: object } }));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  const asApiserver = { cert: apiserver };
  const denied = (uid: string, message: string | RegExp) => ({
    status: 200,
    body: { response: { uid, allowed: false, status: { code: 429, reason: 'TooManyRequests', message } } },
  });

  t.match(
    {
      noCert: await review('virt-launcher-moving-x'),
      otherName: await review('virt-launcher-moving-x', { cert: await clientCert(ca, 'someone-else') }),
    },
    { noCert: { status: 401 }, otherName: { status: 401 } },
    'only the kube-apiserver, with the proxy certificate, is heard',
  );
  t.same(statusWrites, [], 'refused callers change nothing');

  t.match(
    {
      dryRun: await review('virt-launcher-moving-x', { ...asApiserver, dryRun: true }),
      moving: await review('virt-launcher-moving-x', asApiserver),
      pinned: await review('virt-launcher-pinned-x', asApiserver),
      plain: await review('virt-launcher-plain-x', asApiserver),
      notLauncher: await review('web-x', asApiserver),
    },
    {
      dryRun: denied('r-virt-launcher-moving-x', 'Eviction triggered evacuation of VMI "ns/moving"'),
      moving: denied('r-virt-launcher-moving-x', 'Eviction triggered evacuation of VMI "ns/moving"'),
      pinned: denied('r-virt-launcher-pinned-x', /evictionStrategy LiveMigrate but is not live-migratable: DisksNotLiveMigratable/),
      plain: { status: 200, body: { response: { uid: 'r-virt-launcher-plain-x', allowed: true } } },
      notLauncher: { status: 200, body: { response: { uid: 'r-web-x', allowed: true } } },
    },
  );
  t.same(
    statusWrites,
    [['virtualmachineinstances', 'ns', 'moving', undefined, { evacuationNodeName: 'a' }]],
    'only evacuationNodeName is written, and not on a dry run',
  );
  t.match(events, [/^Warning EvictionBlocked: VMI ns\/pinned has evictionStrategy LiveMigrate but is not live-migratable/]);
  t.equal(events.length, 1);
});

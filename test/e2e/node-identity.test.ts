// What a node identity can reach, on the real control plane, under the shipped RBAC
// and admission policy: a node identity reads and writes only the VMIs
// scheduled to it, and the serving-CSR approver keeps the API server's
// addresses and anything outside the configured node ranges out of node
// certificates. The node identities are client certificates from the real CSR
// API (approved by the admin here, as kube-controller-manager approves a
// bootstrap token's); no agent runs, so each request is exactly the one a
// node could make.
import t from 'tap';
import { KubeConfig, type V1CertificateSigningRequest } from '@kubernetes/client-node';
import { requestCertificate } from '../../provider/certs/csr-api.js';
import { clientSubject, KUBELET_CLIENT_SIGNER } from '../../provider/certs/client.js';
import { createKeyAndCsr } from '../../provider/certs/csr.js';
import { KUBELET_SERVING_SIGNER } from '../../provider/certs/serving.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { ipInRanges, localNodeRanges } from '../../provider/controllers/serving-policy.js';
import { makeClients, mergePatch, type KubeClients } from '../../provider/kube/client.js';
import { addresses, defaultRouteDevice } from '../../provider/network/host.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import {
  controllersIdentity,
  csrs,
  poll,
  smokeVmiSpec,
  startTestCluster,
  testLog,
  testNamespace,
  waitFor,
  type TestCluster,
  apiOutcome,
} from './framework/index.js';

const NODE_A = 'vkvm-e2e-node-a';
const NODE_B = 'vkvm-e2e-node-b';
const NS = 'e2e-node-identity';
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS, plural: 'virtualmachineinstances' };
/** Node addresses for the certificates (documentation ranges: never sent to, only written into SANs). */
const NODE_RANGE = '198.51.100.0/24';
const B_IP = '198.51.100.20';
const OUTSIDE_IP = '203.0.113.9';

/** The client certificate the admin approves for system:node:<name>, as clients of that node identity. */
async function nodeIdentity(cluster: TestCluster, nodeName: string): Promise<KubeClients> {
  const admin = cluster.clients.certificates;
  const issued = await requestCertificate(cluster.clients, {
    namePrefix: `node-csr-${nodeName}`,
    signerName: KUBELET_CLIENT_SIGNER,
    usages: ['digital signature', 'client auth'],
    subject: clientSubject(nodeName),
    onCreated: async (name) => {
      const csr = await admin.readCertificateSigningRequest({ name });
      const now = new Date();
      csr.status = {
        conditions: [{ type: 'Approved', status: 'True', reason: 'E2eNodeIdentity', message: 'test node identity', lastUpdateTime: now }],
      };
      await admin.replaceCertificateSigningRequestApproval({ name, body: csr });
    },
  });
  const current = cluster.clients.kc.getCurrentCluster()!;
  const kc = new KubeConfig();
  const user = `system:node:${nodeName}`;
  kc.loadFromOptions({
    clusters: [current],
    users: [
      { name: user, certData: Buffer.from(issued.certPem).toString('base64'), keyData: Buffer.from(issued.keyPem).toString('base64') },
    ],
    contexts: [{ name: user, cluster: current.name, user }],
    currentContext: user,
  });
  return makeClients(kc);
}

t.test('a node identity touches only its own VMIs; serving certificates stay off the API server and outside addresses', async (t) => {
  // The API server on this host's own address (not loopback), so reserving its address is a rule of its own.
  const dev = await defaultRouteDevice();
  const apiIP = dev ? (await addresses(dev))[0]?.split('/')[0] : undefined;
  if (!apiIP) throw new Error('the e2e needs a host address on the default route to bind the API server to');
  const cluster = await startTestCluster(t, { bindAddress: apiIP });
  await installClusterManifests(cluster.kubeconfigPath);
  const nodeRanges = [...(await localNodeRanges()), NODE_RANGE];
  t.ok(
    ipInRanges(apiIP, nodeRanges),
    `the configured ranges (vkvm up's default, this host's networks) include the API server's address ${apiIP}: ${nodeRanges.join(', ')}`,
  );
  const controllers = startControllers(await controllersIdentity(cluster), testLog.child({ component: 'controllers' }), {
    leaseDurationS: 5,
    retryPeriodMs: 500,
    servingCsr: { nodeIpRanges: nodeRanges },
  });
  t.teardown(() => controllers.stop());
  const admin = cluster.clients;
  const [a, b] = await Promise.all([nodeIdentity(cluster, NODE_A), nodeIdentity(cluster, NODE_B)]);
  // Each registers its own Node, as an agent does (NodeRestriction lets a node create only its own).
  for (const [clients, name, ip] of [
    [a, NODE_A, '198.51.100.10'],
    [b, NODE_B, B_IP],
  ] as const) {
    await clients.core.createNode({ body: { metadata: { name, labels: { 'kubernetes.io/hostname': name } } } });
    await clients.core.patchNodeStatus({ name, body: { status: { addresses: [{ type: 'InternalIP', address: ip }] } } }, mergePatch);
  }

  await t.test('VMIs: another node can neither list, read nor write node A’s; node A reads and writes its own', async (t) => {
    const ns = await testNamespace(t, cluster, NS);
    await admin.core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'tenant-network' }, stringData: { networkdata: 'version: 2\n' } },
    });
    const spec = smokeVmiSpec();
    const userData = Buffer.from('#cloud-config\npassword: tenant-a-secret\n').toString('base64');
    spec.volumes = spec.volumes!.map((v) =>
      v.cloudInitNoCloud
        ? { name: v.name, cloudInitNoCloud: { userDataBase64: userData, networkDataSecretRef: { name: 'tenant-network' } } }
        : v,
    );
    await admin.custom.createNamespacedCustomObject({
      ...KV,
      body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'tenant-a' }, spec },
    });
    // No agent runs to make node A Ready, so the admin binds the launcher pod as the scheduler would.
    const pod = await waitFor(ns.pods({ labelSelector: 'kubevirt.io=virt-launcher' }), () => true, { what: 'the launcher pod' });
    const podName = pod.metadata!.name!;
    await admin.core.createNamespacedPodBinding({
      name: podName,
      namespace: NS,
      body: { metadata: { name: podName }, target: { kind: 'Node', name: NODE_A } },
    });
    const scheduled = await waitFor(ns.vmi('tenant-a'), (v) => v.status?.nodeName === NODE_A, { what: 'scheduled to node A' });
    t.equal(scheduled.status?.phase, 'Scheduled', 'the VMI controller wrote Scheduled and nodeName A');

    const patchStatus = (clients: KubeClients, status: object) => () =>
      clients.custom.patchNamespacedCustomObjectStatus({ ...KV, name: 'tenant-a', body: { status } }, mergePatch);
    const policyDenial =
      /ValidatingAdmissionPolicy 'vkvm-node-vmi-status' with binding 'vkvm-node-vmi-status' denied request: a node may write only the status of the VMIs whose status\.nodeName is that node/;
    t.match(
      await apiOutcome(patchStatus(b, { phase: 'Failed' })),
      { code: 403, message: policyDenial },
      'node B patching node A’s VMI to Failed (which would make the VM controller recreate it) is denied by the policy',
    );
    t.match(
      await apiOutcome(() => b.custom.listClusterCustomObject({ group: 'kubevirt.io', version: 'v1', plural: 'virtualmachineinstances' })),
      { code: 403, message: /cannot list resource "virtualmachineinstances"/ },
      'node B listing every VMI (and their inline userData) is forbidden',
    );
    t.match(
      await apiOutcome(() => b.custom.getNamespacedCustomObject({ ...KV, name: 'tenant-a' })),
      { code: 403 },
      'node B reading node A’s VMI by name is forbidden',
    );
    t.match(
      await apiOutcome(() => b.core.readNamespacedSecret({ name: 'tenant-network', namespace: NS })),
      { code: 403, message: /no relationship found between node 'vkvm-e2e-node-b' and this object/ },
      'node B reading node A’s cloud-init Secret is forbidden (Node authorizer)',
    );
    t.match(
      await apiOutcome(() =>
        a.custom.listClusterCustomObject({
          group: 'kubevirt.io',
          version: 'v1',
          plural: 'virtualmachineinstances',
          fieldSelector: `status.nodeName=${NODE_A}`,
        }),
      ),
      { code: 403 },
      'no node lists VMIs across the cluster, even field-selected to itself (RBAC sees no selectors)',
    );

    // Node A reads its VMI as the agent does: by name, and a watch field-selected to that name.
    const own = await poll(
      'node A reading its own VMI',
      () => a.custom.getNamespacedCustomObject({ ...KV, name: 'tenant-a' }) as Promise<VirtualMachineInstance>,
      (v) => Boolean(v),
    );
    t.equal(own.metadata.name, 'tenant-a', 'node A reads its own VMI by name');
    const selected = (await a.custom.listNamespacedCustomObject({ ...KV, fieldSelector: 'metadata.name=tenant-a' })) as {
      items: VirtualMachineInstance[];
    };
    t.same(
      selected.items.map((v) => v.metadata.name),
      ['tenant-a'],
      'node A lists its VMI field-selected by name (what its watch does)',
    );
    t.match(
      await apiOutcome(() => a.core.readNamespacedSecret({ name: 'tenant-network', namespace: NS })),
      { code: 200 },
      'node A reads the Secret through its launcher pod’s volume',
    );
    t.match(await apiOutcome(patchStatus(a, { phase: 'Running' })), { code: 200 }, 'node A writes its own VMI’s status');
    t.match(
      await apiOutcome(patchStatus(a, { nodeName: NODE_B })),
      { code: 403, message: policyDenial },
      'node A cannot hand its VMI to another node',
    );
    const after = (await admin.custom.getNamespacedCustomObject({ ...KV, name: 'tenant-a' })) as VirtualMachineInstance;
    t.match(after.status, { phase: 'Running', nodeName: NODE_A }, 'the VMI has only node A’s own write');
  });

  await t.test(
    'serving CSRs: the API server’s address and addresses outside the node ranges are denied with a reason; a correct one is approved',
    async (t) => {
      const ask = async (name: string, dnsNames: string[], ipAddresses: string[]): Promise<V1CertificateSigningRequest> => {
        const { csrPem } = await createKeyAndCsr({
          commonName: `system:node:${NODE_B}`,
          organizations: ['system:nodes'],
          dnsNames,
          ipAddresses,
        });
        await b.certificates.createCertificateSigningRequest({
          body: {
            metadata: { name },
            spec: {
              request: Buffer.from(csrPem).toString('base64'),
              signerName: KUBELET_SERVING_SIGNER,
              usages: ['digital signature', 'server auth'],
            },
          },
        });
        return waitFor(
          csrs(admin, { name }),
          (c) => Boolean(c.status?.conditions?.some((x) => x.type === 'Denied') || c.status?.certificate),
          { what: 'decided' },
        );
      };
      // A node writes its own addresses: node B claims the API server's, one outside the ranges, and a foreign name.
      const claimed = [
        { type: 'InternalIP', address: B_IP },
        { type: 'ExternalIP', address: apiIP },
        { type: 'ExternalIP', address: OUTSIDE_IP },
        { type: 'Hostname', address: 'vkvm-e2e-other.example' },
      ];
      await b.core.patchNodeStatus({ name: NODE_B, body: { status: { addresses: claimed } } }, mergePatch);
      const api = await ask('node-b-claims-apiserver', [NODE_B], [apiIP]);
      t.match(
        api.status?.conditions,
        [{ type: 'Denied', reason: 'SANReserved', message: new RegExp(`ip:${apiIP.replace(/\./g, '\\.')} \\(the API server's`) }],
        'the API server’s address, inside the ranges and reported by the Node, is denied',
      );
      t.notOk(api.status?.certificate, 'no certificate for the API server’s address');
      const outside = await ask('node-b-claims-outside', [NODE_B], [OUTSIDE_IP]);
      t.match(
        outside.status?.conditions,
        [{ type: 'Denied', reason: 'IPOutsideNodeRanges', message: new RegExp(OUTSIDE_IP.replace(/\./g, '\\.')) }],
        'an address outside the configured node ranges is denied',
      );
      const name = await ask('node-b-foreign-dns', ['vkvm-e2e-other.example'], [B_IP]);
      t.match(
        name.status?.conditions,
        [{ type: 'Denied', reason: 'DNSNameNotAllowed', message: /dns:vkvm-e2e-other\.example/ }],
        'a DNS name other than the node name, with no pattern configured, is denied (though the Node reports it)',
      );
      const good = await ask('node-b-correct', [NODE_B], [B_IP]);
      t.match(
        { conditions: good.status?.conditions, issued: Boolean(good.status?.certificate) },
        { conditions: [{ type: 'Approved', reason: 'VkvmNodeServingCertApproved' }], issued: true },
        'its own name and in-range address are approved and signed',
      );
    },
  );
});

// The node agent on the real control plane: registration, labels, taint,
// capacity, lease heartbeat, node lifecycle on agent death and restart,
// scheduling by taint/toleration, kubelet API authn/authz and the serving
// certificate issued through the CSR API.
import { request } from 'node:https';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import t from 'tap';
import type { V1Node } from '@kubernetes/client-node';
import { createKeyAndCsr, signedBy } from '../../provider/certs/csr.js';
import {
  condition,
  csrs,
  leases,
  nodes,
  restartAgent,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
  type TestCluster,
} from './framework/index.js';

const NODE = 'vkvm-e2e-node';
// Short grace so the real node-lifecycle controller reacts within the test.
const GRACE_S = 16;

interface HttpsResult {
  status: number;
  body: string;
  peerCertPem: string;
}

function kubeletGet(ip: string, port: number, path: string, tls: { ca: string; cert?: string; key?: string }): Promise<HttpsResult> {
  return new Promise((resolve, reject) => {
    const req = request({ host: ip, port, path, method: 'GET', ca: tls.ca, cert: tls.cert, key: tls.key, timeout: 10_000 }, (res) => {
      // Read the peer certificate now: the socket is detached once the response ends.
      const raw = (res.socket as TLSSocket).getPeerCertificate().raw;
      const peerCertPem = `-----BEGIN CERTIFICATE-----\n${raw
        .toString('base64')
        .match(/.{1,64}/g)!
        .join('\n')}\n-----END CERTIFICATE-----\n`;
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, peerCertPem }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A client certificate for `user`, issued by the real CSR API (signer kube-apiserver-client). */
async function clientCertFor(cluster: TestCluster, user: string): Promise<{ cert: string; key: string }> {
  const { keyPem, csrPem } = await createKeyAndCsr({ commonName: user, organizations: [], dnsNames: [], ipAddresses: [] });
  const name = `e2e-${user}`;
  await cluster.clients.certificates.createCertificateSigningRequest({
    body: {
      metadata: { name },
      spec: { request: Buffer.from(csrPem).toString('base64'), signerName: 'kubernetes.io/kube-apiserver-client', usages: ['client auth'] },
    },
  });
  const approve = await cluster.kubectl(['certificate', 'approve', name]);
  if (approve.code !== 0) throw new Error(approve.stderr);
  const csr = await waitFor(csrs(cluster.clients, { name }), (c) => Boolean(c.status?.certificate), { what: 'issued' });
  return { cert: Buffer.from(csr.status!.certificate!, 'base64').toString(), key: keyPem };
}

const theNode = (cluster: TestCluster) => nodes(cluster.clients, { name: NODE });

t.test('node agent on the real control plane', async (t) => {
  const cluster = await startTestCluster(t, { nodeMonitorGracePeriodS: GRACE_S });
  const caPem = await readFile(join(cluster.stateDir, 'pki', 'ca.crt'), 'utf8');
  let agent = await startAgent(t, cluster, { nodeName: NODE });
  const started = Date.now();

  const node: V1Node = await waitFor(theNode(cluster), (n) => condition(n, 'Ready') === 'True', { what: 'Ready' });
  // Speed is the bench's to measure, not a test's to assert (shared 2-core machines).
  const readyMs = Date.now() - started;
  const uid = node.metadata!.uid!;

  await t.test('registers with the documented labels, taint, capacity and addresses', async (t) => {
    t.comment(`Ready ${readyMs} ms after the agent started`);
    t.match(node, {
      metadata: {
        labels: {
          type: 'virtual-kubelet',
          'kubernetes.io/hostname': NODE,
          'kubernetes.io/os': 'linux',
          'kubernetes.io/arch': 'amd64',
          'kubevirt.io/schedulable': 'true',
          'vkvm.io/virtualization': /^(kvm|tcg)$/,
        },
      },
      spec: { taints: [{ key: 'virtual-kubelet.io/provider', value: 'kvm', effect: 'NoSchedule' }] },
      status: {
        capacity: { cpu: /^\d+$/, memory: /^\d+Ki$/, 'ephemeral-storage': /^\d+Ki$/, pods: '110' },
        allocatable: { pods: '110' },
        addresses: [{ type: 'InternalIP' }, { type: 'Hostname' }],
        daemonEndpoints: { kubeletEndpoint: { Port: agent.kubeletPort } },
        nodeInfo: { kubeletVersion: 'v0.1.0', operatingSystem: 'linux', architecture: 'amd64' },
      },
    });
    const internalIP = node.status!.addresses!.find((a) => a.type === 'InternalIP')!.address;
    t.same(
      Object.fromEntries(Object.entries(node.metadata!.annotations ?? {}).filter(([k]) => k.startsWith('flannel.alpha.coreos.com/'))),
      {
        'flannel.alpha.coreos.com/kube-subnet-manager': 'true',
        'flannel.alpha.coreos.com/backend-type': 'host-gw',
        'flannel.alpha.coreos.com/backend-data': 'null',
        'flannel.alpha.coreos.com/public-ip': internalIP,
      },
      "what flannel's host-gw nodes read to route to this node's pod range via its InternalIP",
    );
    const types = (node.status!.conditions ?? []).map((c) => c.type).sort();
    t.same(types, [
      'CgroupLayout',
      'DiskPressure',
      'GuestMemory',
      'HardwareVirtualization',
      'HugePages',
      'IPForwarding',
      'ImageCacheSpace',
      'MemoryPressure',
      'NetworkUnavailable',
      'PIDPressure',
      'QemuUser',
      'Ready',
      'VirtualizationPackages',
    ]);
    const tcg = node.metadata!.labels!['vkvm.io/virtualization'] === 'tcg';
    t.equal('devices.kubevirt.io/kvm' in (node.status!.capacity ?? {}), !tcg, 'KVM device resource only where KVM is usable');
    t.equal(condition(node, 'HardwareVirtualization'), tcg ? 'False' : 'True');
  });

  await t.test('the lease in kube-node-lease is owned by the node and its renewTime advances', async (t) => {
    const first = await cluster.clients.coordination.readNamespacedLease({ name: NODE, namespace: 'kube-node-lease' });
    const owned = {
      spec: { holderIdentity: NODE, leaseDurationSeconds: 40 },
      metadata: { ownerReferences: [{ kind: 'Node', name: NODE, uid }] },
    };
    t.match(first, owned);
    const t0 = new Date(first.spec!.renewTime!).getTime();
    const later = await waitFor(
      leases(cluster.clients, 'kube-node-lease', { name: NODE }),
      (l) => new Date(l.spec!.renewTime!).getTime() > t0,
      {
        what: 'renewTime advanced',
        deadlineMs: 30_000,
      },
    );
    t.match(later, owned, 'renewed by the node: the same holder and owner');
  });

  await t.test('kubelet API: 401 anonymous, 403 without nodes/proxy, served to the apiserver', async (t) => {
    const ip = node.status!.addresses!.find((a) => a.type === 'InternalIP')!.address;
    const anonymous = await kubeletGet(ip, agent.kubeletPort, '/pods', { ca: caPem });
    t.equal(anonymous.status, 401, 'anonymous request is rejected');
    t.ok(signedBy(anonymous.peerCertPem, caPem), 'serving certificate chains to the cluster CA (TLS verified against it)');

    const bob = await clientCertFor(cluster, 'bob');
    const forbidden = await kubeletGet(ip, agent.kubeletPort, '/pods', { ca: caPem, ...bob });
    t.match({ status: forbidden.status, body: forbidden.body }, { status: 403, body: /user=bob.*subresource=proxy/ });

    const viaApiserver = await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/pods`]);
    t.match(
      { code: viaApiserver.code, out: viaApiserver.stdout },
      { code: 0, out: /"kind":"PodList"/ },
      'apiserver kubelet-client identity is authorized',
    );
    const healthz = await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/healthz`]);
    t.match({ code: healthz.code, out: healthz.stdout }, { code: 0, out: 'ok' });
  });

  await t.test('the serving certificate was issued through the CSR API', async (t) => {
    const csrs = await cluster.clients.certificates.listCertificateSigningRequest();
    const serving = csrs.items.filter((c) => c.spec.signerName === 'kubernetes.io/kubelet-serving');
    t.equal(serving.length, 1, 'one kubelet-serving CSR');
    t.match(serving[0], {
      status: { conditions: [{ type: 'Approved', status: 'True' }], certificate: /./ },
      spec: { usages: ['digital signature', 'server auth'] },
    });
    const issued = Buffer.from(serving[0]!.status!.certificate!, 'base64').toString();
    t.ok(signedBy(issued, caPem), 'issued certificate chains to the cluster CA');
  });

  await t.test('scheduling: the taint keeps ordinary pods off; nodeSelector + toleration lands on the node', async (t) => {
    // Deleted with this subtest: the tolerated pod's VM does not outlive it.
    const ns = await testNamespace(t, cluster, 'e2e-sched');
    // Any vkvm node (type: virtual-kubelet), with and without the toleration of its taint.
    await ns.createPod(testGuestPod({ name: 'untolerated', tolerate: false }));
    await ns.createPod(testGuestPod({ name: 'tolerated' }));
    const bound = await waitFor(ns.pod('tolerated'), (p) => Boolean(p.spec?.nodeName), { what: 'bound' });
    t.equal(bound.spec!.nodeName, NODE, 'bound to the vkvm node by the real scheduler');
    const refused = await waitFor(
      ns.pod('untolerated'),
      (p) => p.status?.conditions?.some((c) => c.type === 'PodScheduled' && c.reason === 'Unschedulable') ?? false,
      {
        what: "the scheduler's verdict",
      },
    );
    t.match(
      { nodeName: refused.spec?.nodeName, condition: refused.status?.conditions?.find((c) => c.type === 'PodScheduled') },
      { nodeName: undefined, condition: { status: 'False', reason: 'Unschedulable', message: /untolerated taint/ } },
    );
  });

  await t.test('killing the agent makes the node-lifecycle controller mark it Unknown; a restart makes it Ready, same UID', async (t) => {
    await agent.kill('SIGKILL');
    const lost = await waitFor(theNode(cluster), (n) => condition(n, 'Ready') === 'Unknown', {
      what: 'Ready Unknown',
      deadlineMs: (GRACE_S + 40) * 1000,
    });
    t.match(
      lost.status!.conditions!.find((c) => c.type === 'Ready'),
      { status: 'Unknown', reason: 'NodeStatusUnknown' },
    );
    agent = await restartAgent(t, cluster, agent);
    const back = await waitFor(theNode(cluster), (n) => condition(n, 'Ready') === 'True', { what: 'Ready again' });
    t.equal(back.metadata!.uid, uid, 'the same Node object was adopted');
    const nodes = await cluster.clients.core.listNode();
    t.equal(nodes.items.filter((n) => n.metadata?.name === NODE).length, 1, 'never a second node');
    t.ok(
      agent.output.some((l) => l.includes('adopted existing node')),
      'agent logged the adoption',
    );
    t.ok(
      agent.output.some((l) => l.includes('reusing kubelet serving certificate')),
      'restart reuses the stored serving certificate',
    );
  });
});

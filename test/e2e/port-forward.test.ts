// kubectl port-forward to VM pods on the real control plane: a tenant (edit in
// one namespace) reaches the guest's HTTP server through kube-apiserver and the
// node's kubelet API, on a bridge pod (the guest holds the pod address) and a
// masquerade pod (only its listed port reaches the guest; another one is
// refused with the kubelet's error); ssh reaches the guest's dropbear; the
// kubelet's WebSocket variant works through kube-apiserver too; a view-only
// user is refused.
import t from 'tap';
import { WebSocket, type ClientOptions } from 'ws';
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';
import {
  authorizeKey,
  createTenant,
  httpGet,
  kubectlAs,
  kubectlPortForward,
  runCommand,
  SSH_OPTIONS,
  sshKey,
  isRunningAndReady,
  kubeconfigFile,
  poll,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-portfwd';
const NS = 'e2e-portfwd';
const BOOT_DEADLINE_MS = 240_000;

function vmPod(name: string, network: 'bridge' | 'masquerade', ports?: number[]): V1Pod {
  return testGuestPod({
    name,
    node: NODE,
    annotations: { 'vkvm.io/pod-network': network },
    terminationGracePeriodSeconds: 1,
    ...(ports ? { ports } : {}),
  });
}

/**
 * port-forward as a WebSocket client speaks it (v4.channel.k8s.io, ports in
 * the query), which kube-apiserver passes to the node unchanged: sends an
 * HTTP request on the data channel and returns what came back on each channel.
 */
async function webSocketForward(
  kc: KubeClients['kc'],
  pod: string,
  port: number,
): Promise<{ data: string; error: string; prefix: number }> {
  const server = kc.getCurrentCluster()!.server.replace(/^https:/, 'wss:');
  const options: ClientOptions = {};
  await kc.applyToHTTPSOptions(options);
  const ws = new WebSocket(`${server}/api/v1/namespaces/${NS}/pods/${pod}/portforward?ports=${port}`, ['v4.channel.k8s.io'], options);
  const received = new Map<number, Buffer>();
  ws.on('message', (d: Buffer) => received.set(d[0]!, Buffer.concat([received.get(d[0]!) ?? Buffer.alloc(0), d.subarray(1)])));
  ws.on('open', () => ws.send(Buffer.concat([Buffer.of(0), Buffer.from('GET / HTTP/1.0\r\nHost: guest\r\n\r\n')])));
  await new Promise((resolve, reject) => {
    ws.once('close', resolve);
    ws.once('error', reject);
  });
  const data = received.get(0) ?? Buffer.alloc(0);
  return {
    prefix: data.readUInt16LE(0),
    data: data.subarray(2).toString(),
    error: (received.get(1) ?? Buffer.alloc(2)).subarray(2).toString(),
  };
}

t.test('kubectl port-forward to VM pods', async (t) => {
  const cluster = await startTestCluster(t);
  await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const viewer = await createTenant(cluster.clients, NS, 'viewer', 'view');
  const tenantConfig = await kubeconfigFile(t, tenant);
  const viewerConfig = await kubeconfigFile(t, viewer);
  for (const pod of [vmPod('bridged', 'bridge'), vmPod('masq', 'masquerade', [8080])]) {
    await tenant.core.createNamespacedPod({ namespace: NS, body: { ...pod, metadata: { ...pod.metadata, namespace: NS } } });
  }
  const [bridged, masq] = await Promise.all(
    ['bridged', 'masq'].map((name) =>
      waitFor(ns.pod(name), isRunningAndReady, { what: 'Running and Ready', deadlineMs: BOOT_DEADLINE_MS }),
    ),
  );

  // kubectl port-forward ends at the first connection the pod refuses (as kubectl does since 1.23), so forwarding starts
  // once both guests serve: their web servers write the guest's address when DHCP gave it one.
  for (const pod of ['bridged', 'masq']) {
    await poll(
      `the ${pod} guest serving its address`,
      () => kubectlAs(cluster, tenantConfig, NS, ['exec', pod, '--', '/bin/cat', '/www/index.html']),
      (r) => r.code === 0 && /^vkvm-guest \d/.test(r.stdout),
      { deadlineMs: BOOT_DEADLINE_MS },
    );
  }

  await t.test('a tenant reaches the guest of a bridge pod, which holds the pod address', async (t) => {
    const forward = await kubectlPortForward(t, cluster, tenantConfig, NS, 'bridged', 80);
    const body = await poll(
      'the guest HTTP server through kubectl port-forward',
      () => httpGet(forward.localPort),
      (b) => b.startsWith('vkvm-guest 1'),
      {
        deadlineMs: BOOT_DEADLINE_MS,
      },
    );
    t.equal(body, `vkvm-guest ${bridged!.status!.podIP}`);
  });

  await t.test('a masquerade pod forwards its listed port to the guest and no other', async (t) => {
    const listed = await kubectlPortForward(t, cluster, tenantConfig, NS, 'masq', 8080);
    const body = await poll(
      'the guest HTTP server on the listed port',
      () => httpGet(listed.localPort),
      (b) => b.startsWith('vkvm-guest 1'),
      {
        deadlineMs: BOOT_DEADLINE_MS,
      },
    );
    t.equal(body, 'vkvm-guest 10.0.2.2', 'the answer comes from the guest behind the pod address');
    const unlisted = await kubectlPortForward(t, cluster, tenantConfig, NS, 'masq', 80);
    await t.rejects(httpGet(unlisted.localPort), 'port 80 is not forwarded to the guest');
    await poll(
      'kubectl reporting the error',
      async () => unlisted.stderr(),
      (s) => s.includes('error forwarding port 80'),
    );
    t.match(
      unlisted.stderr(),
      new RegExp(
        `error forwarding port 80 to pod masq_${NS}, uid ${masq!.metadata!.uid}: connect ECONNREFUSED ${masq!.status!.podIP!.replace(/\./g, '\\.')}:80`,
      ),
      "the kubelet's error, naming the pod's own address",
    );
  });

  await t.test("ssh into the guest's dropbear through kubectl port-forward, with a key the test set-up wrote", async (t) => {
    const key = await sshKey(t);
    t.match(
      await kubectlAs(cluster, tenantConfig, NS, ['exec', 'bridged', '--', '/bin/sh', '-c', authorizeKey(key.publicKey)]),
      { code: 0 },
      'the key is in place (through the guest agent)',
    );
    const forward = await kubectlPortForward(t, cluster, tenantConfig, NS, 'bridged', 22);
    const ssh = () =>
      runCommand('ssh', [
        '-i',
        key.path,
        ...SSH_OPTIONS.flatMap((o) => ['-o', o]),
        '-p',
        `${forward.localPort}`,
        'root@127.0.0.1',
        'echo ssh-$((6*7)) on $(hostname)',
      ]);
    const out = await poll('a command over ssh', ssh, (o) => o.code === 0, { deadlineMs: 120_000, intervalMs: 2000 });
    t.equal(out.stdout, 'ssh-42 on vkvm-guest\n');
  });

  await t.test("the kubelet API's WebSocket port-forward, through kube-apiserver", async (t) => {
    const answer = await webSocketForward(tenant.kc, 'bridged', 80);
    t.match(answer, {
      prefix: 80,
      data: new RegExp(`^HTTP/1\\.[01] 200 OK[\\s\\S]*\\r\\n\\r\\nvkvm-guest ${bridged!.status!.podIP}\\n$`),
      error: '',
    });
  });

  await t.test('a view-only user may not forward ports', async (t) => {
    t.match(await kubectlAs(cluster, viewerConfig, NS, ['port-forward', 'pod/bridged', ':80']), {
      code: 1,
      stderr: new RegExp(`cannot create resource "pods/portforward" in API group "" in the namespace "${NS}"`),
    });
  });
});

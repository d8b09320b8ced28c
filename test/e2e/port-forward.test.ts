// kubectl port-forward to VM pods on the real control plane: a tenant (edit in
// one namespace) reaches the guest's HTTP server through kube-apiserver and the
// node's kubelet API, on a bridge pod (the guest holds the pod address) and a
// masquerade pod (only its listed port reaches the guest; another one is
// refused with the kubelet's error); ssh reaches the guest's dropbear; the
// kubelet's WebSocket variant works through kube-apiserver too; a view-only
// user is refused.
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t, { type Test } from 'tap';
import { WebSocket, type ClientOptions } from 'ws';
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';
import {
  createTenant,
  isRunningAndReady,
  kubeconfigFile,
  poll,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
  type TestCluster,
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

interface PortForward {
  localPort: number;
  /** kubectl's stderr so far. */
  stderr: () => string;
}

/** `kubectl port-forward pod/<pod> :<port>` as the user of `kubeconfig`, until the test ends. */
async function portForward(t: Test, cluster: TestCluster, kubeconfig: string, pod: string, port: number): Promise<PortForward> {
  const child = spawn(cluster.binary, ['kubectl', `--kubeconfig=${kubeconfig}`, '-n', NS, 'port-forward', `pod/${pod}`, `:${port}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => void child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const localPort = await new Promise<number>((resolve, reject) => {
    createInterface({ input: child.stdout }).on('line', (line) => {
      const m = /^Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)$/.exec(line);
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`kubectl port-forward exited (${code}): ${stderr}`)));
  });
  return { localPort, stderr: () => stderr };
}

/** kubectl as the user of `kubeconfig`; its exit code and output. */
function kubectlAs(cluster: TestCluster, kubeconfig: string, args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(cluster.binary, ['kubectl', `--kubeconfig=${kubeconfig}`, '-n', NS, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stderr })));
}

/** A program's exit code and output. */
function run(program: string, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(program, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stdout, stderr })));
}

/** ssh with a throw-away identity: no prompts, no known_hosts (the guest makes new host keys each boot). */
const sshOptions = (key: string) => [
  '-i',
  key,
  '-o',
  'IdentitiesOnly=yes',
  '-o',
  'BatchMode=yes',
  '-o',
  'StrictHostKeyChecking=no',
  '-o',
  'UserKnownHostsFile=/dev/null',
  '-o',
  'ConnectTimeout=20',
  '-o',
  'LogLevel=ERROR',
];

/** GET / through a local port; the body, or the error. */
async function get(localPort: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${localPort}/`, { signal: AbortSignal.timeout(20_000) });
  return (await res.text()).trim();
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

  await t.test('a tenant reaches the guest of a bridge pod, which holds the pod address', async (t) => {
    const forward = await portForward(t, cluster, tenantConfig, 'bridged', 80);
    // The guest serves its address once DHCP gave it one.
    const body = await poll(
      'the guest HTTP server through kubectl port-forward',
      () => get(forward.localPort),
      (b) => b.startsWith('vkvm-guest 1'),
      {
        deadlineMs: BOOT_DEADLINE_MS,
      },
    );
    t.equal(body, `vkvm-guest ${bridged!.status!.podIP}`);
  });

  await t.test('a masquerade pod forwards its listed port to the guest and no other', async (t) => {
    const listed = await portForward(t, cluster, tenantConfig, 'masq', 8080);
    const body = await poll(
      'the guest HTTP server on the listed port',
      () => get(listed.localPort),
      (b) => b.startsWith('vkvm-guest 1'),
      {
        deadlineMs: BOOT_DEADLINE_MS,
      },
    );
    t.equal(body, 'vkvm-guest 10.0.2.2', 'the answer comes from the guest behind the pod address');
    const unlisted = await portForward(t, cluster, tenantConfig, 'masq', 80);
    await t.rejects(get(unlisted.localPort), 'port 80 is not forwarded to the guest');
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
    const dir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-ssh-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const key = join(dir, 'id');
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key]);
    const publicKey = (await readFile(`${key}.pub`, 'utf8')).trim();
    t.match(
      await kubectlAs(cluster, tenantConfig, [
        'exec',
        'bridged',
        '--',
        '/bin/sh',
        '-c',
        `mkdir -p /root/.ssh && echo '${publicKey}' >/root/.ssh/authorized_keys`,
      ]),
      { code: 0 },
      'the key is in place (through the guest agent)',
    );
    const forward = await portForward(t, cluster, tenantConfig, 'bridged', 22);
    const ssh = () =>
      run('ssh', [...sshOptions(key), '-p', String(forward.localPort), 'root@127.0.0.1', 'echo ssh-$((6*7)) on $(hostname)']);
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
    t.match(await kubectlAs(cluster, viewerConfig, ['port-forward', 'pod/bridged', ':80']), {
      code: 1,
      stderr: new RegExp(`cannot create resource "pods/portforward" in API group "" in the namespace "${NS}"`),
    });
  });
});

// Issue 16's streams with KubeVirt's own virtctl (v1.5.1) against the real
// control plane, the subresource API, the controllers and a node agent
// booting the test guest, as a tenant (edit in one namespace): virtctl
// port-forward to a VM and to its VMI reaches the guest's HTTP server, and
// over UDP (udp/LOCAL:7) the guest's UDP echo;
// virtctl ssh runs the local ssh through virtctl port-forward --stdio to the
// guest's dropbear; kubectl port-forward reaches the same VM through its
// launcher pod; virtctl vnc --proxy-only serves a real VNC client
// (vncdotool) a whole framebuffer not all one colour, and while that session
// is open a second one asking preserveSession=true gets 503. A viewer may do
// none of it.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { once } from 'node:events';
import { WebSocket, type ClientOptions } from 'ws';
import t from 'tap';
import type { KubeClients } from '../../provider/kube/client.js';
import { UDP_ECHO_PORT } from '../../vmm/guest/udp-echo.js';
import { ensureVirtctl } from '../helpers/virtctl.js';
import { captureScreen, ensureVncdotool } from '../helpers/vnc-client.js';
import {
  authorizeKey,
  condition,
  createTenant,
  httpGet,
  kubeconfigFile,
  kubectlAs,
  kubectlPortForward,
  poll,
  runCommand,
  smokeVm,
  SSH_OPTIONS,
  sshKey,
  startAgent,
  startSubresourcesAndControllers,
  startForwarder,
  startTestCluster,
  testNamespace,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-vstreams';
const NS = 'e2e-vstreams';
const BOOT_DEADLINE_MS = 240_000;
/** The smoke VM's guest sits behind masquerade: it serves the address it holds there. */
const GUEST_PAGE = 'vkvm-guest 10.0.2.2';

/** Any free local port, for virtctl port-forward's LOCAL:REMOTE. */
async function freeLocalPort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A UDP socket on a free local port, closed with the test. */
async function udpClient(t: { teardown(fn: () => void): void }): Promise<UdpSocket> {
  const socket = createSocket('udp4');
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  t.teardown(() => socket.close());
  return socket;
}

/** How the subresource API answers a WebSocket to a VMI's vnc (a refusal's status and body, or an upgrade). */
async function vncUpgrade(user: KubeClients, query: string): Promise<{ status: number; body: string } | 'upgraded'> {
  const server = user.kc.getCurrentCluster()!.server.replace(/^https:/, 'wss:');
  const options: ClientOptions = {};
  await user.kc.applyToHTTPSOptions(options);
  const url = `${server}/apis/subresources.kubevirt.io/v1/namespaces/${NS}/virtualmachineinstances/testvm/vnc?${query}`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['plain.kubevirt.io'], options);
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.on('open', () => {
      ws.close(1000);
      resolve('upgraded');
    });
    ws.on('error', reject);
  });
}

t.test('virtctl port-forward, ssh and vnc', async (t) => {
  const [virtctlBin, venv] = await Promise.all([ensureVirtctl(), ensureVncdotool()]);
  const cluster = await startTestCluster(t);
  await startSubresourcesAndControllers(t, cluster);
  await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const viewer = await createTenant(cluster.clients, NS, 'viewer', 'view');
  const kubeconfigs = { tenant: await kubeconfigFile(t, tenant), viewer: await kubeconfigFile(t, viewer) };
  // KUBECONFIG rather than --kubeconfig: virtctl ssh's ProxyCommand runs virtctl again without its flags.
  const asUser = (who: keyof typeof kubeconfigs) => ({ KUBECONFIG: kubeconfigs[who] });
  const virtctl = (args: string[], who: keyof typeof kubeconfigs = 'tenant') =>
    runCommand(virtctlBin, [`--namespace=${NS}`, ...args], asUser(who));
  const virtctlForward = (target: string, remote: number) =>
    freeLocalPort().then((local) =>
      startForwarder(
        t,
        virtctlBin,
        [`--namespace=${NS}`, 'port-forward', target, `${local}:${remote}`],
        (line) => (line.includes(`127.0.0.1:${local}`) ? local : undefined),
        asUser('tenant'),
      ),
    );

  await tenant.custom.createNamespacedCustomObject({
    group: 'kubevirt.io',
    version: 'v1',
    namespace: NS,
    plural: 'virtualmachines',
    body: { ...smokeVm('testvm'), metadata: { name: 'testvm', namespace: NS } },
  });
  await waitFor(ns.vm('testvm'), (v) => v.status?.printableStatus === 'Running' && v.status.ready === true, {
    what: 'Running and ready',
    deadlineMs: BOOT_DEADLINE_MS,
  });
  await poll(
    'APIService v1.subresources.kubevirt.io Available',
    () =>
      cluster.clients.objects.read({
        apiVersion: 'apiregistration.k8s.io/v1',
        kind: 'APIService',
        metadata: { name: 'v1.subresources.kubevirt.io' },
      }),
    (s) => condition(s as { status?: { conditions?: Array<{ type: string; status: string }> } }, 'Available') === 'True',
  );

  // The guest serves its page once DHCP gave it an address, which may be after Ready; a forward
  // ends at its first refused connection (as kubectl's does), so forwards start once it serves.
  const launcherPod = async () => {
    const pods = await cluster.clients.core.listNamespacedPod({ namespace: NS, labelSelector: 'vm.kubevirt.io/name=testvm' });
    const pod = pods.items[0]?.metadata?.name;
    if (!pod) throw new Error('no launcher pod');
    return pod;
  };
  await poll(
    'the guest serving its page',
    async () => kubectlAs(cluster, kubeconfigs.tenant, NS, ['exec', await launcherPod(), '--', '/bin/cat', '/www/index.html']),
    (r) => r.code === 0 && r.stdout.trim() === GUEST_PAGE,
    { deadlineMs: BOOT_DEADLINE_MS },
  );

  await t.test("virtctl port-forward to the VM and to its VMI reaches the guest's HTTP server", async (t) => {
    const viaVm = await virtctlForward('vm/testvm', 80);
    t.equal(
      await poll(
        'the guest page through vm/testvm',
        () => httpGet(viaVm.localPort),
        (b) => b === GUEST_PAGE,
      ),
      GUEST_PAGE,
    );
    const viaVmi = await virtctlForward('vmi/testvm', 80);
    t.equal(
      await poll(
        'the guest page through vmi/testvm',
        () => httpGet(viaVmi.localPort),
        (b) => b === GUEST_PAGE,
      ),
      GUEST_PAGE,
      'and through vmi/testvm',
    );
  });

  await t.test('virtctl port-forward udp/LOCAL:7 carries datagrams to and back from the guest', async (t) => {
    // virtctl's own UDP listener: its port is free now, so it is free for virtctl.
    const free = createSocket('udp4');
    await new Promise<void>((resolve) => free.bind(0, '127.0.0.1', resolve));
    const local = free.address().port;
    await new Promise<void>((resolve) => free.close(resolve));
    await startForwarder(
      t,
      virtctlBin,
      [`--namespace=${NS}`, 'port-forward', 'vmi/testvm', `udp/${local}:${UDP_ECHO_PORT}`],
      (line) => (line.includes(`forwarding udp 127.0.0.1:${local}`) ? local : undefined),
      asUser('tenant'),
    );
    const client = await udpClient(t);
    const replies: string[] = [];
    client.on('message', (m) => replies.push(String(m)));
    // virtctl says it forwards before it listens, and UDP may drop: send until one comes back.
    const sent: string[] = [];
    await poll(
      'a datagram echoed by the guest through virtctl port-forward',
      async () => {
        const payload = `vkvm-udp-${sent.length}`;
        sent.push(payload);
        client.send(payload, local, '127.0.0.1');
        await once(client, 'message', { signal: AbortSignal.timeout(2000) }).catch(() => undefined);
        return replies.length;
      },
      (n) => n > 0,
      { deadlineMs: 60_000, intervalMs: 0 },
    );
    sent.push('a second datagram');
    client.send('a second datagram', local, '127.0.0.1');
    await poll(
      'the second datagram echoed',
      async () => replies,
      (r) => r.includes('a second datagram'),
      { deadlineMs: 30_000, intervalMs: 100 },
    );
    t.same(
      { second: replies.includes('a second datagram'), notSent: replies.filter((r) => !sent.includes(r)) },
      { second: true, notSent: [] },
      `each datagram came back as it was sent, over the same tunnel: ${JSON.stringify(replies)}`,
    );
  });

  await t.test("virtctl ssh: the local ssh, its ProxyCommand virtctl port-forward --stdio, the guest's dropbear", async (t) => {
    const key = await sshKey(t);
    const pod = await launcherPod();
    t.match(
      await kubectlAs(cluster, kubeconfigs.tenant, NS, ['exec', pod, '--', '/bin/sh', '-c', authorizeKey(key.publicKey)]),
      { code: 0 },
      'the key is in place (through the guest agent)',
    );
    const ssh = await poll(
      'a command over virtctl ssh',
      () =>
        virtctl([
          'ssh',
          '--identity-file',
          key.path,
          ...SSH_OPTIONS.flatMap((o) => ['--local-ssh-opts', `-o ${o}`]),
          '--command',
          'echo ssh-$((6*7))',
          'root@vm/testvm',
        ]),
      (r) => r.code === 0,
      { deadlineMs: 120_000, intervalMs: 2000 },
    );
    t.equal(ssh.stdout, 'ssh-42\n', 'the command ran in the guest');

    const forward = await kubectlPortForward(t, cluster, kubeconfigs.tenant, NS, pod, 22);
    const viaKubectl = await runCommand('ssh', [
      '-i',
      key.path,
      ...SSH_OPTIONS.flatMap((o) => ['-o', o]),
      '-p',
      `${forward.localPort}`,
      'root@127.0.0.1',
      'echo kubectl-$((6*7))',
    ]);
    t.match(viaKubectl, { code: 0, stdout: 'kubectl-42\n' }, 'kubectl port-forward to the launcher pod reaches the same guest');
  });

  await t.test(
    'virtctl vnc --proxy-only serves a real VNC client a whole framebuffer; preserveSession=true meanwhile is 503',
    async (t) => {
      const proxy = await startForwarder(
        t,
        virtctlBin,
        [`--namespace=${NS}`, 'vnc', '--proxy-only', 'testvm'],
        (line) => {
          const m = /^\{"port":(\d+)\}$/.exec(line.trim());
          return m ? Number(m[1]) : undefined;
        },
        asUser('tenant'),
      );
      // virtctl opened the VMI's vnc before it printed the port: the session is open.
      t.match(
        await vncUpgrade(tenant, 'preserveSession=true'),
        { status: 503, body: /"reason":"ServiceUnavailable"/ },
        'a session that would keep the open one is refused',
      );
      const screen = await captureScreen(venv, `127.0.0.1::${proxy.localPort}`);
      t.ok(
        screen.width >= 640 && screen.height >= 400 && screen.colours > 1,
        `a VGA screen with something on it: ${JSON.stringify(screen)}`,
      );
    },
  );

  await t.test('a viewer may neither forward ports nor open the display', async (t) => {
    const ssh = await virtctl(['ssh', '--command', 'true', '--local-ssh-opts', '-o BatchMode=yes', 'root@vm/testvm'], 'viewer');
    t.match(
      { failed: ssh.code !== 0, stderr: ssh.stderr },
      { failed: true, stderr: /cannot get resource "virtualmachines\/portforward"/ },
      'ssh: its ProxyCommand (virtctl port-forward --stdio) was refused',
    );
    // Bounded: a proxy that was let in would serve until killed.
    const vnc = await runCommand('timeout', ['60', virtctlBin, `--namespace=${NS}`, 'vnc', '--proxy-only', 'testvm'], asUser('viewer'));
    t.match({ failed: vnc.code !== 0, stderr: vnc.stderr }, { failed: true, stderr: /cannot get resource "virtualmachineinstances\/vnc"/ });
  });
});

// Every VM's VNC display on the real control plane: the node's kubelet API
// serves it at /vnc/<namespace>/<pod>, reached through kube-apiserver's node
// proxy as a WebSocket of raw RFB bytes; a real VNC client (vncdotool) runs
// the handshake and reads a whole framebuffer whose pixels are not all one
// colour. QEMU listens on a unix socket only: no VNC port on the node. A
// tenant, who has no nodes/proxy, is refused. A guest escaped into QEMU owns
// the socket's directory: a symlink it plants there in place of the socket,
// to a root-owned service, is refused and that service sees no connection.
import { execFile } from 'node:child_process';
import { lstat, mkdtemp, rm, stat, symlink } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { WebSocket, type ClientOptions } from 'ws';
import type { KubeClients } from '../../provider/kube/client.js';
import { captureScreen, ensureVncdotool, tcpToWebSocket } from '../helpers/vnc-client.js';
import {
  createTenant,
  isRunningAndReady,
  poll,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
} from './framework/index.js';

const execFileP = promisify(execFile);

const NODE = 'vkvm-e2e-vnc';
const NS = 'e2e-vnc';
const BOOT_DEADLINE_MS = 240_000;

/** The node proxy's URL of the pod's display, and the TLS options of `clients`' user. */
async function vncUrl(clients: KubeClients, pod: string): Promise<{ url: string; options: ClientOptions }> {
  const server = clients.kc.getCurrentCluster()!.server.replace(/^https:/, 'wss:');
  const options: ClientOptions = {};
  await clients.kc.applyToHTTPSOptions(options);
  return { url: `${server}/api/v1/nodes/${NODE}/proxy/vnc/${NS}/${pod}`, options };
}

/** The HTTP status a WebSocket upgrade is answered with, if it is refused. */
function refusal(url: string, options: ClientOptions): Promise<{ status: number; body: string } | 'upgraded'> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['plain.kubevirt.io'], options);
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    ws.on('open', () => {
      ws.close();
      resolve('upgraded');
    });
    ws.on('error', reject);
  });
}

t.test('the VNC display of a VM pod through the node proxy', async (t) => {
  const [venv, cluster] = await Promise.all([ensureVncdotool(), startTestCluster(t)]);
  const agent = await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  await ns.createPod(testGuestPod({ name: 'vm1', node: NODE, terminationGracePeriodSeconds: 1 }));
  const pod = await waitFor(ns.pod('vm1'), isRunningAndReady, { what: 'Running and Ready', deadlineMs: BOOT_DEADLINE_MS });

  const admin = await vncUrl(cluster.clients, 'vm1');
  const port = await tcpToWebSocket(t, admin.url, admin.options);
  const screen = await captureScreen(venv, `127.0.0.1::${port}`);
  t.match(screen, { width: Number, height: Number }, 'vncdotool read a whole framebuffer');
  t.ok(screen.width >= 640 && screen.height >= 400 && screen.colours > 1, `a VGA screen with something on it: ${JSON.stringify(screen)}`);

  const qemu = qemuPidsOf(pod.metadata!.uid!);
  const listening = (await execFileP('ss', ['-Hltnp'])).stdout;
  t.same(
    { qemu: qemu.length, listening: qemu.filter((pid) => listening.includes(`pid=${pid},`)) },
    { qemu: 1, listening: [] },
    "the VM's QEMU listens on no TCP port",
  );

  const asTenant = await vncUrl(tenant, 'vm1');
  t.match(
    await refusal(asTenant.url, asTenant.options),
    { status: 403, body: /cannot get resource \\"nodes\/proxy\\"/ },
    'a tenant has no way in here',
  );

  // As a compromised QEMU would: its uid may replace any name in its own socket directory.
  const hostDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-vnc-host-'));
  t.teardown(() => rm(hostDir, { recursive: true, force: true }));
  let hostConnections = 0;
  const hostService = createServer((c) => (hostConnections++, c.destroy()));
  await new Promise<void>((resolve) => hostService.listen(join(hostDir, 'root.sock'), resolve));
  t.teardown(() => new Promise<void>((resolve) => hostService.close(() => resolve())));
  const vncSocket = join(agent.stateDir, 'vms', pod.metadata!.uid!, 'qemu', 'vnc.sock');
  const qemuOwned = await stat(vncSocket);
  await rm(vncSocket);
  await symlink(join(hostDir, 'root.sock'), vncSocket);
  await execFileP('chown', ['-h', `${qemuOwned.uid}:${qemuOwned.gid}`, vncSocket]);
  t.match(
    { answer: await refusal(admin.url, admin.options), planted: (await lstat(vncSocket)).isSymbolicLink(), hostConnections },
    { answer: { status: 500 }, planted: true, hostConnections: 0 },
    'a symlink planted in place of the VNC socket is refused, and the host service it points at is never reached',
  );
  await poll(
    'the agent to log why it refused',
    async () => agent.output.filter((l) => l.includes(`${vncSocket} is a symlink; refusing to follow it`)).length,
    (n) => n === 1,
  );

  await poll(
    'the node to count the VNC session closed',
    async () => (await cluster.kubectl(['get', '--raw', `/api/v1/nodes/${NODE}/proxy/metrics`])).stdout,
    (metrics) => /vkvm_streaming_sessions\{endpoint="vnc"\} 0/.test(metrics),
  );
});

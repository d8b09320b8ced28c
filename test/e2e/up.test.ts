// `vkvm up` end to end: a local control plane plus this host as a Ready node,
// CRDs and RBAC installed, served on an address other hosts could join, and
// nothing left running after SIGINT.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { freePort } from '../../deploy/cluster/cluster.js';
import { loadKubeConfig, makeClients } from '../../provider/kube/client.js';
import { CLI, condition, waitFor } from './harness.js';
import { defaultRouteDevice, links } from '../../provider/network/host.js';

/** Processes whose command line mentions `needle`, as "pid command line". */
async function processesMentioning(needle: string): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    if (cmdline.includes(needle)) found.push(`${entry} ${cmdline.replaceAll('\0', ' ').trim()}`);
  }
  return found;
}

/** This host's IPv4 address on its default route: what another host would join. */
async function hostAddress(): Promise<string> {
  const dev = await defaultRouteDevice();
  const address = networkInterfaces()[dev ?? '']?.find((a) => a.family === 'IPv4' && !a.internal)?.address;
  if (!address) throw new Error(`no IPv4 address on the default route device ${dev}`);
  return address;
}

t.test('bad --control-plane-address input names the flag and starts nothing', async (t) => {
  for (const [args, message] of [
    [['--control-plane-address=nope'], 'vkvm: --control-plane-address: "nope" is not an IP address'],
    [['--control-plane-address=10.0.0.1', '--kubeconfig=/nonexistent'], 'vkvm: --control-plane-address: applies to the local control plane; with --kubeconfig there is none'],
  ] as const) {
    const child = spawn(process.execPath, [CLI, 'up', '--state-dir=/nonexistent/vkvm-up', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    t.same({ code, stderr: stderr.trim() }, { code: 1, stderr: message }, args.join(' '));
  }
});

t.test('vkvm up brings this host up as a Ready node and Ctrl-C leaves nothing behind', async (t) => {
  const stateDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-up-'));
  // mkdtemp makes it 0700; QEMU (unprivileged) must reach the VM disks below it.
  await chmod(stateDir, 0o711);
  t.teardown(() => rm(stateDir, { recursive: true, force: true }));
  const nodeName = 'vkvm-up-e2e';
  const bridge = `vku${randomBytes(4).toString('hex')}`;
  const address = await hostAddress();
  const started = Date.now();
  const child = spawn(
    process.execPath,
    [CLI, 'up', `--state-dir=${stateDir}`, `--control-plane-address=${address}`, `--node-name=${nodeName}`, `--kubelet-port=${await freePort()}`, '--healthz-port=0', '--subresources-port=0', `--bridge=${bridge}`],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  t.teardown(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    for (const p of await processesMentioning(stateDir)) process.kill(Number(p.split(' ')[0]), 'SIGKILL');
  });
  const output: string[] = [];
  const upLine = await new Promise<string>((resolve, reject) => {
    for (const s of [child.stdout, child.stderr]) {
      createInterface({ input: s }).on('line', (line) => {
        output.push(line);
        if (line.startsWith('vkvm: node ')) resolve(line);
      });
    }
    void exited.then((e) => reject(new Error(`vkvm up exited early (${JSON.stringify(e)}):\n${output.slice(-40).join('\n')}`)));
  });
  const kubeconfig = join(stateDir, 'kubeconfig');
  t.equal(upLine, `vkvm: node ${nodeName} is up. Use it with: export KUBECONFIG=${kubeconfig}`, 'one line says how to use it');

  const kc = loadKubeConfig(kubeconfig);
  t.equal(kc.getCurrentCluster()?.server, `https://${address}:6443`, 'the kubeconfig names the control-plane address');
  // Every call below goes to that address and verifies the apiserver's certificate for it.
  const clients = makeClients(kc);
  const node = await waitFor('node Ready', () => clients.core.readNode({ name: nodeName }), (n) => condition(n, 'Ready') === 'True');
  t.comment(`Ready ${Date.now() - started} ms after vkvm up started`);
  t.match(node, {
    metadata: { labels: { type: 'virtual-kubelet', 'kubevirt.io/schedulable': 'true' } },
    spec: { taints: [{ key: 'virtual-kubelet.io/provider', effect: 'NoSchedule' }] },
    status: { capacity: { cpu: /^\d+$/, memory: /Ki$/, pods: '110' } },
  });
  const role = await clients.kc.makeApiClient((await import('@kubernetes/client-node')).RbacAuthorizationV1Api).readClusterRole({ name: 'vkvm:node-agent' });
  t.equal(role.metadata?.name, 'vkvm:node-agent', 'RBAC installed');

  t.ok((await processesMentioning(stateDir)).length >= 3, 'control plane components run while up');
  await waitFor('the pod network bridge', links, (l) => l.has(bridge));
  child.kill('SIGINT');
  const result = await exited;
  t.same(result, { code: 0, signal: null }, 'exits 0 on SIGINT');
  t.same(await processesMentioning(stateDir), [], 'no control plane or DHCP process left behind');
  t.notOk((await links()).has(bridge), 'the pod network bridge it created is gone');
});

// `vkvm up` end to end: a local control plane plus this host as a Ready node,
// CRDs and RBAC installed, served on an address other hosts could join, etcd
// closed to anyone without an etcd client certificate, and nothing left
// running after a Ctrl-C or SIGTERM at any moment of start-up, or after
// vkvm up is killed; a host it cannot use is refused before anything starts.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, lstat, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { networkInterfaces, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { AuthenticationV1Api, CoreV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import t, { type Test } from 'tap';
import { freePort } from '../../deploy/cluster/cluster.js';
import { loadKubeConfig, makeClients } from '../../provider/kube/client.js';
import { packageRoot } from '../../provider/package-root.js';
import { CONTROLLERS_USER } from '../../provider/cli/up-controllers.js';
import { argvOf, pidsWhere } from '../helpers/processes.js';
import { CLI, condition, nodes, poll, qemuPidsOf, testGuestPod, waitFor } from './framework/index.js';
import { defaultRouteDevice, links } from '../../provider/network/host.js';

/** Running processes whose command line mentions `needle`, as "pid command line". */
async function processesMentioning(needle: string): Promise<string[]> {
  return pidsWhere((argv) => argv.some((a) => a.includes(needle))).map((pid) => `${pid} ${argvOf(pid).join(' ')}`);
}

/** This host's IPv4 address on its default route: what another host would join. */
async function hostAddress(): Promise<string> {
  const dev = await defaultRouteDevice();
  const address = networkInterfaces()[dev ?? '']?.find((a) => a.family === 'IPv4' && !a.internal)?.address;
  if (!address) throw new Error(`no IPv4 address on the default route device ${dev}`);
  return address;
}

/** A state dir QEMU can reach (mkdtemp makes it 0700), removed after the test. */
async function stateDirFor(t: Test): Promise<string> {
  const stateDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-up-'));
  await chmod(stateDir, 0o711);
  t.teardown(() => rm(stateDir, { recursive: true, force: true }));
  return stateDir;
}

interface UpRun {
  output: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The first output line `match` accepts, once it is printed. */
  line(what: string, match: (line: string) => boolean): Promise<string>;
  /** What a terminal's Ctrl-C does: signal the whole foreground process group. */
  signalGroup(signal: NodeJS.Signals): void;
  pid: number;
}

/**
 * Starts `vkvm up` (or `npm start`, the README's command) in its own process
 * group, as a shell starts a foreground job.
 */
function startUp(t: Test, stateDir: string, args: string[], opts: { npm?: boolean } = {}): UpRun {
  const upArgs = [`--state-dir=${stateDir}`, '--subresources-port=0', ...args];
  const [cmd, argv] = opts.npm ? ['npm', ['start', '--', ...upArgs]] : [process.execPath, [CLI, 'up', ...upArgs]];
  const child = spawn(cmd, argv, { cwd: packageRoot(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const output: string[] = [];
  const waiters = new Set<{ match: (line: string) => boolean; resolve: (line: string) => void }>();
  for (const s of [child.stdout, child.stderr]) {
    createInterface({ input: s }).on('line', (line) => {
      output.push(line);
      for (const w of waiters) {
        if (!w.match(line)) continue;
        waiters.delete(w);
        w.resolve(line);
      }
    });
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    for (const p of await processesMentioning(stateDir)) process.kill(Number(p.split(' ')[0]), 'SIGKILL');
  });
  const line = (what: string, match: (line: string) => boolean) =>
    new Promise<string>((resolve, reject) => {
      const seen = output.find(match);
      if (seen !== undefined) return resolve(seen);
      waiters.add({ match, resolve });
      void exited.then((e) => reject(new Error(`vkvm up exited (${JSON.stringify(e)}) before ${what}:\n${output.slice(-40).join('\n')}`)));
    });
  return { output, exited, line, signalGroup: (signal) => process.kill(-child.pid!, signal), pid: child.pid! };
}

const logged = (msg: string) => (line: string) => line.includes(`"msg":"${msg}"`);
const isUpLine = (line: string) => line.startsWith('vkvm: node ');

/** `path` and everything below it that is not 0600 (files) or 0700 (directories), with its mode. */
async function looserThanPrivate(path: string): Promise<string[]> {
  // Files come and go while etcd runs.
  const st = await lstat(path).catch(() => undefined);
  if (!st || !(st.isFile() || st.isDirectory())) return [];
  const mode = st.mode & 0o777;
  const found = mode === (st.isDirectory() ? 0o700 : 0o600) ? [] : [`${path} ${mode.toString(8)}`];
  if (st.isDirectory()) for (const name of await readdir(path).catch(() => [])) found.push(...(await looserThanPrivate(join(path, name))));
  return found;
}

/** GET against etcd's client port; the error message if the connection is refused. */
function etcdGet(
  path: string,
  tls?: { ca: string; cert?: string; key?: string },
): Promise<{ status?: number; body?: string; error?: string }> {
  return new Promise((resolve) => {
    const opts = { host: '127.0.0.1', port: 2379, path, timeout: 10_000 };
    const req = tls ? httpsRequest({ ...opts, ...tls, servername: 'localhost' }) : httpRequest(opts);
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ error: err.message }));
    req.end();
  });
}

t.test('bad --control-plane-address input names the flag and starts nothing', async (t) => {
  for (const [args, message] of [
    [['--control-plane-address=nope'], 'vkvm: --control-plane-address: "nope" is not an IP address'],
    [
      ['--control-plane-address=10.0.0.1', '--kubeconfig=/nonexistent'],
      'vkvm: --control-plane-address: applies to the local control plane; with --kubeconfig there is none',
    ],
  ] as const) {
    const child = spawn(process.execPath, [CLI, 'up', '--state-dir=/nonexistent/vkvm-up', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    t.same({ code, stderr: stderr.trim() }, { code: 1, stderr: message }, args.join(' '));
  }
});

t.test('a --state-dir QEMU cannot search is refused before anything starts', async (t) => {
  // As `mktemp -d` makes it: 0700.
  const stateDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-up-0700-'));
  t.teardown(() => rm(stateDir, { recursive: true, force: true }));
  const run = startUp(t, stateDir, ['--node-name=vkvm-up-0700', `--kubelet-port=${await freePort()}`, '--healthz-port=0']);
  t.same(await run.exited, { code: 1, signal: null }, 'exits 1');
  t.match(
    run.output.join('\n'),
    new RegExp(
      `^vkvm: preflight failed; nothing was started\\. Fix and re-run:\\n  - StateDirSearchable: ${stateDir} is not searchable by other users \\(mode o\\+x\\): QEMU runs unprivileged`,
    ),
    'says which directory and why, without a stack',
  );
  t.same(await readdir(stateDir), [], 'no control plane was started: nothing was written to the state dir');
});

t.test(
  'vkvm up brings this host up as a Ready node, etcd takes only its client certificate, and Ctrl-C leaves nothing behind',
  async (t) => {
    const stateDir = await stateDirFor(t);
    const nodeName = 'vkvm-up-e2e';
    const bridge = `vku${randomBytes(4).toString('hex')}`;
    const address = await hostAddress();
    const started = Date.now();
    const run = startUp(t, stateDir, [
      `--control-plane-address=${address}`,
      `--node-name=${nodeName}`,
      `--kubelet-port=${await freePort()}`,
      '--healthz-port=0',
      `--bridge=${bridge}`,
    ]);
    const upLine = await run.line('the "is up" line', isUpLine);
    const kubeconfig = join(stateDir, 'kubeconfig');
    t.equal(upLine, `vkvm: node ${nodeName} is up. Use it with: export KUBECONFIG=${kubeconfig}`, 'one line says how to use it');

    const kc = loadKubeConfig(kubeconfig);
    t.equal(kc.getCurrentCluster()?.server, `https://${address}:6443`, 'the kubeconfig names the control-plane address');
    // Every call below goes to that address and verifies the apiserver's certificate for it.
    const clients = makeClients(kc);
    const node = await waitFor(nodes(clients, { name: nodeName }), (n) => condition(n, 'Ready') === 'True', { what: 'Ready' });
    t.comment(`Ready ${Date.now() - started} ms after vkvm up started`);
    t.match(node, {
      metadata: { labels: { type: 'virtual-kubelet', 'kubevirt.io/schedulable': 'true' } },
      spec: { taints: [{ key: 'virtual-kubelet.io/provider', effect: 'NoSchedule' }] },
      status: { capacity: { cpu: /^\d+$/, memory: /Ki$/, pods: '110' } },
    });
    const role = await clients.kc.makeApiClient(RbacAuthorizationV1Api).readClusterRole({ name: 'vkvm:node-agent' });
    t.equal(role.metadata?.name, 'vkvm:node-agent', 'RBAC installed');

    // Node 1 runs as the node it is, as a joined node does: a kubelet client certificate vkvm up approved for it.
    const asNode = makeClients(loadKubeConfig(join(stateDir, 'node-credentials', 'kubeconfig')));
    const review = await asNode.kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} });
    t.match(
      review.status?.userInfo,
      { username: `system:node:${nodeName}`, groups: ['system:nodes', 'system:authenticated'] },
      "the agent's kubeconfig is the node's identity, not the admin's",
    );
    const refused = (call: Promise<unknown>) =>
      call.then(
        () => 200,
        (err: { code?: number }) => err.code,
      );
    t.equal(
      await refused(asNode.kc.makeApiClient(CoreV1Api).listNamespacedSecret({ namespace: 'kube-system' })),
      403,
      'and that identity is held by the Node authorizer: no secrets of kube-system',
    );
    // So do the controllers, as `vkvm controllers` on a joined cluster: their own user, bound to the shipped roles only.
    const asControllers = loadKubeConfig(join(stateDir, 'controllers', 'kubeconfig'));
    const { username, groups } = (await asControllers.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({ body: {} })).status!
      .userInfo!;
    t.same(
      { username, groups },
      { username: CONTROLLERS_USER, groups: ['system:authenticated'] },
      "the controllers' kubeconfig is their own user",
    );
    const mayReadSecretsOrEscalate = async (as: typeof kc) => ({
      secrets: await refused(as.makeApiClient(CoreV1Api).listNamespacedSecret({ namespace: 'kube-system' })),
      clusterAdmin: await refused(
        as.makeApiClient(RbacAuthorizationV1Api).createClusterRoleBinding({
          dryRun: 'All',
          body: {
            metadata: { name: 'vkvm-e2e-controllers-escalate' },
            roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' },
            subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: CONTROLLERS_USER }],
          },
        }),
      ),
    });
    t.same(
      { admin: await mayReadSecretsOrEscalate(kc), controllers: await mayReadSecretsOrEscalate(asControllers) },
      { admin: { secrets: 200, clusterAdmin: 200 }, controllers: { secrets: 403, clusterAdmin: 403 } },
      "what admin may, the controllers' identity may not: read the secrets of kube-system, make itself cluster-admin",
    );
    t.same(await looserThanPrivate(join(stateDir, 'controllers')), [], "the controllers' credentials are 0700/0600");

    const pki = join(stateDir, 'cluster', 'pki');
    const [etcdCa, etcdClientCert, etcdClientKey, adminCert, adminKey] = await Promise.all(
      ['etcd-ca.crt', 'apiserver-etcd-client.crt', 'apiserver-etcd-client.key', 'admin.crt', 'admin.key'].map((f) =>
        readFile(join(pki, f), 'utf8'),
      ),
    );
    t.match(await etcdGet('/health'), { error: String, status: undefined }, 'etcd refuses plain HTTP');
    t.match(
      await etcdGet('/health', { ca: etcdCa! }),
      { error: String, status: undefined },
      'etcd refuses TLS without a client certificate',
    );
    t.match(
      await etcdGet('/health', { ca: etcdCa!, cert: adminCert!, key: adminKey! }),
      { error: String, status: undefined },
      'and a certificate of the cluster CA (cluster admin, nodes)',
    );
    const health = await etcdGet('/health', { ca: etcdCa!, cert: etcdClientCert!, key: etcdClientKey! });
    t.match(
      { status: health.status, body: JSON.parse(health.body ?? '{}') as unknown },
      { status: 200, body: { health: 'true' } },
      "the apiserver's etcd client certificate gets in",
    );
    t.same(await looserThanPrivate(join(stateDir, 'cluster')), [], 'every file of the control plane is 0600, every directory 0700');

    t.ok((await processesMentioning(stateDir)).length >= 3, 'control plane components run while up');
    // So that its removal below means something.
    await poll('the pod network bridge', links, (l) => l.has(bridge));
    run.signalGroup('SIGINT');
    t.same(await run.exited, { code: 0, signal: null }, 'exits 0 on Ctrl-C');
    t.same(await processesMentioning(stateDir), [], 'no control plane or DHCP process left behind');
    t.notOk((await links()).has(bridge), 'the pod network bridge it created is gone');
  },
);

t.test('Ctrl-C or SIGTERM at any moment of start-up stops everything, and the next vkvm up starts', async (t) => {
  const stateDir = await stateDirFor(t);
  const moments: Array<{ what: string; signal: NodeJS.Signals; npm?: boolean; at: (line: string) => boolean }> = [
    { what: 'while the control plane starts', signal: 'SIGTERM', at: (l) => l.includes('started kube-apiserver') },
    { what: 'right after "control plane ready", under npm start', signal: 'SIGINT', npm: true, at: logged('control plane ready') },
    { what: 'while the agent starts', signal: 'SIGINT', at: logged('host probed') },
    { what: 'after "is up"', signal: 'SIGTERM', at: isUpLine },
  ];
  for (const m of moments) {
    await t.test(`${m.signal} ${m.what}`, async (t) => {
      const bridge = `vku${randomBytes(4).toString('hex')}`;
      // debug: the control plane's own progress lines are logged at debug level.
      const run = startUp(
        t,
        stateDir,
        [
          '--node-name=vkvm-up-signals',
          `--kubelet-port=${await freePort()}`,
          '--healthz-port=0',
          `--bridge=${bridge}`,
          '--log-level=debug',
        ],
        {
          npm: m.npm ?? false,
        },
      );
      await run.line(m.what, m.at);
      run.signalGroup(m.signal);
      const exited = await run.exited;
      // npm reports its own status; vkvm's shows in its output.
      if (!m.npm) t.same(exited, { code: 0, signal: null }, 'vkvm up exits 0');
      t.notOk(
        run.output.some((l) => l.startsWith('vkvm: ') && !isUpLine(l)),
        'no error',
      );
      t.ok(run.output.some(logged('stopping')), 'says it stops');
      t.same(
        await processesMentioning(stateDir),
        [],
        'no etcd, apiserver, controller-manager, scheduler or DHCP process of the state dir left',
      );
      t.notOk((await links()).has(bridge), 'no pod network bridge left');
    });
  }
});

t.test('vkvm up killed: the control plane and the VMs die with it, and the next vkvm up on the state dir starts', async (t) => {
  const stateDir = await stateDirFor(t);
  const nodeName = 'vkvm-up-killed';
  const bridge = `vku${randomBytes(4).toString('hex')}`;
  const args = [`--node-name=${nodeName}`, `--kubelet-port=${await freePort()}`, '--healthz-port=0', `--bridge=${bridge}`];
  const first = startUp(t, stateDir, args);
  await first.line('the "is up" line', isUpLine);
  const controllersPem = () => readFile(join(stateDir, 'controllers', 'client.pem'), 'utf8');
  const firstControllersPem = await controllersPem();
  const clients = makeClients(loadKubeConfig(join(stateDir, 'kubeconfig')));
  const pod = await clients.core.createNamespacedPod({ namespace: 'default', body: testGuestPod({ name: 'vm', node: nodeName }) });
  const uid = pod.metadata!.uid!;
  await poll(
    'the VM runs',
    async () => qemuPidsOf(uid),
    (pids) => pids.length > 0,
    { deadlineMs: 180_000, intervalMs: 200 },
  );
  t.ok((await processesMentioning(join(stateDir, 'vms', uid))).length > 0, 'its launcher runs');

  process.kill(first.pid, 'SIGKILL');
  t.same(await first.exited, { code: null, signal: 'SIGKILL' });
  // The launcher gives the guest its ACPI grace period; dnsmasq and the bridge stay as network state the next agent takes over.
  const leftOver = async () => ({
    processes: (await processesMentioning(stateDir)).filter((p) => !p.includes('dnsmasq')),
    qemu: qemuPidsOf(uid),
  });
  const left = await poll('the control plane and the launcher to exit', leftOver, (l) => l.processes.length === 0 && l.qemu.length === 0, {
    deadlineMs: 120_000,
  }).catch(leftOver);
  t.same(left, { processes: [], qemu: [] }, 'no etcd, apiserver, controller-manager, scheduler, launcher or QEMU process left');

  const second = startUp(t, stateDir, args);
  const upAgain = await second.line('the "is up" line of the next vkvm up', isUpLine);
  t.equal(
    upAgain,
    `vkvm: node ${nodeName} is up. Use it with: export KUBECONFIG=${join(stateDir, 'kubeconfig')}`,
    'the next vkvm up on the state dir starts',
  );
  t.equal(await controllersPem(), firstControllersPem, "with the controllers' certificate of the first, not a new one");
  second.signalGroup('SIGINT');
  t.same(await second.exited, { code: 0, signal: null }, 'and stops on Ctrl-C');
  t.same(await processesMentioning(stateDir), [], 'leaving nothing of the state dir running');
  t.same(qemuPidsOf(uid), [], 'nor the VM');
  t.notOk((await links()).has(bridge), 'nor the pod network bridge');
});

// Issue 16 acceptance: KubeVirt's own virtctl (v1.5.1, built from the Go
// module proxy) against the real control plane, the subresource API
// registered with its aggregation layer, the controllers and a node agent
// booting the test guest. As a tenant (a ServiceAccount with `edit` in one
// namespace): version; start, and the error for starting a running VM;
// console (a command through the guest's serial shell, a second session
// displacing the first); guestosinfo, userlist and fslist from the guest
// agent; pause and unpause; soft-reboot (the console shows a second boot);
// restart (a new VMI); stop; start --paused. A viewer gets 403 from start and
// console; no credentials at all get 401; the tenant cannot act on another
// namespace's VM, through the aggregator or at the node.
import { request } from 'node:https';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { makeClients, type KubeClients } from '../../provider/kube/client.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { defaultRouteAddress } from '../../provider/node/default-address.js';
import { startSubresourceApi } from '../../provider/subresources/start.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { ensureVirtctl, openConsole, runVirtctl } from '../helpers/virtctl.js';
import {
  condition,
  createTenant,
  kubevirtIn,
  poll,
  smokeVm,
  startAgent,
  startTestCluster,
  testLog,
  testNamespace,
  waitFor,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-virtctl';
const NS = 'e2e-virtctl';
const OTHER_NS = 'e2e-virtctl-other';
const BOOT_DEADLINE_MS = 240_000;
const GUEST_BOOT_MARKER = 'VKVM-GUEST-BOOTED';

t.test('virtctl drives VMs through the subresource API', async (t) => {
  const virtctlBin = await ensureVirtctl();
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const address = await defaultRouteAddress();
  if (!address) throw new Error('the host needs a default route: the apiserver dials the subresource API there');
  const api = await startSubresourceApi(cluster.clients, testLog, { address, port: 0 });
  t.teardown(() => api.close());
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500, onLeading: () => api.register() });
  t.teardown(() => controllers.stop());
  const agent = await startAgent(t, cluster, { nodeName: NODE });

  const ns = await testNamespace(t, cluster, NS);
  const other = await testNamespace(t, cluster, OTHER_NS);
  const tenant = await createTenant(cluster.clients, NS);
  const viewer = await viewerOf(cluster.clients, NS);
  const dir = t.testdir();
  const kubeconfigs = { tenant: join(dir, 'tenant.kubeconfig'), viewer: join(dir, 'viewer.kubeconfig') };
  await writeFile(kubeconfigs.tenant, tenant.kc.exportConfig());
  await writeFile(kubeconfigs.viewer, viewer.kc.exportConfig());

  const as = (who: keyof typeof kubeconfigs, namespace = NS) => [`--kubeconfig=${kubeconfigs[who]}`, `--namespace=${namespace}`];
  const virtctl = (args: string[], who: keyof typeof kubeconfigs = 'tenant', namespace = NS) =>
    runVirtctl(virtctlBin, [...as(who, namespace), ...args]);
  const consoleOf = (vmi = 'testvm', who: keyof typeof kubeconfigs = 'tenant') => openConsole(virtctlBin, [...as(who), 'console', vmi]);
  const kv = kubevirtIn(ns);
  const vmIs = (what: string, ok: (vm: VirtualMachine) => boolean, deadlineMs = 60_000) =>
    waitFor(ns.vm('testvm'), ok, { what, deadlineMs });
  const vmiIs = (what: string, ok: (vmi: VirtualMachineInstance) => boolean, deadlineMs = 60_000) =>
    waitFor(ns.vmi('testvm'), ok, { what, deadlineMs });
  const running = async () => {
    const vm = await vmIs('Running and ready', (v) => v.status?.printableStatus === 'Running' && v.status.ready === true, BOOT_DEADLINE_MS);
    const vmi = await vmiIs('Running', (v) => v.status?.phase === 'Running');
    return { vm, vmi };
  };

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

  await t.test('virtctl version prints the server version', async (t) => {
    t.match(
      await virtctl(['version']),
      {
        code: 0,
        stdout: /^Client Version: version\.Info\{GitVersion:"v1\.5\.1".*\nServer Version: version\.Info\{GitVersion:"v\d+\.\d+\.\d+"/m,
      },
      'client and server versions, the server read by a tenant',
    );
  });

  const halted = (name: string): VirtualMachine => ({ ...smokeVm(name), spec: { ...smokeVm(name).spec, runStrategy: 'Halted' } });
  // The tenant creates its VM, as a user would; another namespace has one it must not touch.
  await tenant.custom.createNamespacedCustomObject({
    group: 'kubevirt.io',
    version: 'v1',
    namespace: NS,
    plural: 'virtualmachines',
    body: { ...halted('testvm'), metadata: { name: 'testvm', namespace: NS } },
  });
  await kubevirtIn(other).createVm(halted('othervm'));

  await t.test('expand returns a VM without instance types as it is, and names the field it cannot expand', async (t) => {
    const expanded = await virtctl(['expand', '--vm', 'testvm', '--output', 'json']);
    t.match(
      { code: expanded.code, vm: expanded.code === 0 ? (JSON.parse(expanded.stdout) as unknown) : expanded.stderr },
      {
        code: 0,
        vm: { kind: 'VirtualMachine', metadata: { name: 'testvm', namespace: NS }, spec: { runStrategy: 'Halted', template: {} } },
      },
      'the stored VM',
    );
    const file = join(t.testdir(), 'typed.json');
    await writeFile(file, JSON.stringify({ ...halted('typed'), spec: { ...halted('typed').spec, instancetype: { name: 'u1.small' } } }));
    t.match(
      await virtctl(['expand', '--file', file], 'viewer'),
      { code: 1, stderr: /spec\.instancetype: VirtualMachineClusterInstancetype u1\.small not found/ },
      'a sent VM naming an instance type the cluster lacks, refused naming the field (view may expand)',
    );
  });

  await t.test('start runs a Halted VM; starting it again, or an unknown VM, is refused as KubeVirt refuses it', async (t) => {
    t.match(await virtctl(['start', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to start/ }, 'virtctl start accepted');
    const { vm, vmi } = await running();
    t.match(
      { runStrategy: vm.spec.runStrategy, printableStatus: vm.status?.printableStatus, phase: vmi.status?.phase },
      { runStrategy: 'Always', printableStatus: 'Running', phase: 'Running' },
      'runStrategy Always, VM Running, VMI Running',
    );
    t.match(
      await virtctl(['start', 'testvm']),
      { code: 1, stderr: /Operation cannot be fulfilled on virtualmachine\.kubevirt\.io "testvm": VM is already running/ },
      'a running VM cannot start',
    );
    t.match(
      await virtctl(['start', 'nosuchvm']),
      { code: 1, stderr: /virtualmachine\.kubevirt\.io "nosuchvm" not found/ },
      'an unknown VM',
    );
  });

  await t.test("console reaches the guest's serial shell; a second session displaces the first", async (t) => {
    const first = consoleOf();
    t.teardown(() => first.kill());
    await first.connected;
    // Running comes before the guest's shell reads the console: what is typed earlier is lost.
    t.match(await first.runOnceReady('echo $((6*7))vc', '42vc'), /42vc/, 'the command ran in the guest and its output came back');
    const second = consoleOf();
    t.teardown(() => second.kill());
    await second.connected;
    t.match(await first.exited, { code: 0 }, 'the first session ended, closed normally, when the second connected');
    t.match(await second.run('echo $((7*6))again', '42again'), /42again/, 'the second session works');
    // For userlist and fslist below: the cloud-init seed mounted, and a login session the agent sees in utmp.
    await second.run('mkdir -p /mnt; echo made$((1+1))', 'made2');
    await second.run('for d in /dev/vd?; do mount -t iso9660 -o ro $d /mnt && echo "seed-on-$d" && break; done', 'seed-on-/dev/vd');
    // Last: input typed while login hands the terminal to the new shell can be lost.
    await second.run('login -f root', '#');
    second.detach();
    t.match(await second.exited, { code: 0 }, 'Ctrl-] detaches');
  });

  await t.test('guestosinfo, userlist and fslist return what the guest agent reports', async (t) => {
    // As in KubeVirt, the agent's answers reach the VMI a little after its channel connects.
    await vmiIs(
      'AgentConnected and guestOSInfo',
      (v) => condition(v, 'AgentConnected') === 'True' && !!v.status?.guestOSInfo?.kernelRelease,
      BOOT_DEADLINE_MS,
    );
    const json = async (args: string[]) => {
      const r = await virtctl(args);
      t.equal(r.code, 0, `virtctl ${args[0]} succeeded ${r.stderr}`);
      return JSON.parse(r.stdout) as unknown;
    };
    // The host name is the VMI's once the guest's cloud-init has run (meta-data local-hostname, as KubeVirt sets it).
    await poll(
      "the guest's host name, set by its cloud-init",
      async () => {
        const r = await virtctl(['guestosinfo', 'testvm']);
        return r.code === 0 ? (JSON.parse(r.stdout) as { hostname?: string }).hostname : r.stderr;
      },
      (h) => h === 'testvm',
      { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 2000 },
    );
    t.match(
      await json(['guestosinfo', 'testvm']),
      {
        guestAgentVersion: /^\d+\./,
        hostname: 'testvm',
        os: { kernelRelease: /^\d+\.\d+/, machine: 'x86_64' },
        fsInfo: { disks: Array },
      },
      'the agent, the host name and the OS, as the agent reports them',
    );
    t.match(
      await json(['userlist', 'testvm']),
      { items: [{ userName: 'root', loginTime: Number }] },
      'the user logged in on the console, from the guest agent',
    );
    // Only /mnt: the guest's own cloud-init step may hold the seed mounted a moment longer.
    const fslist = (await json(['fslist', 'testvm'])) as { items?: Array<{ mountPoint?: string }> };
    t.match(
      fslist.items?.filter((i) => i.mountPoint === '/mnt'),
      [{ diskName: /^vd[a-z]$/, mountPoint: '/mnt', fileSystemType: 'iso9660', totalBytes: Number, disk: [{ busType: 'virtio' }] }],
      `the seed mounted on /mnt, from the guest agent: ${JSON.stringify(fslist)}`,
    );
    for (const read of ['guestosinfo', 'userlist', 'fslist']) {
      t.match(await virtctl([read, 'testvm'], 'viewer'), { code: 0 }, `a viewer may read ${read}`);
    }
  });

  await t.test('pause and unpause, by vm and by vmi', async (t) => {
    t.match(await virtctl(['pause', 'vm', 'testvm']), { code: 0, stdout: /VMI testvm was scheduled to pause/ }, 'pause vm accepted');
    await vmIs('Paused', (v) => v.status?.printableStatus === 'Paused');
    t.equal(condition(await vmiIs('Paused condition', (v) => condition(v, 'Paused') === 'True'), 'Paused'), 'True', 'VMI condition Paused');
    t.match(await virtctl(['pause', 'vmi', 'testvm']), { code: 1, stderr: /VMI is already paused/ }, 'pausing twice is refused');
    t.match(await virtctl(['soft-reboot', 'testvm']), { code: 1, stderr: /VMI is paused/ }, 'a paused VMI cannot soft-reboot');
    t.match(await virtctl(['unpause', 'vmi', 'testvm']), { code: 0, stdout: /VMI testvm was scheduled to unpause/ }, 'unpause accepted');
    await vmIs('Running again', (v) => v.status?.printableStatus === 'Running');
    await vmiIs('no Paused condition', (v) => condition(v, 'Paused') === undefined);
    t.match(await virtctl(['unpause', 'vm', 'testvm']), { code: 1, stderr: /VMI is not paused/ }, 'unpausing a running VMI is refused');
  });

  await t.test('soft-reboot reboots the guest: its console shows a second boot, on the same VMI', async (t) => {
    const before = await kv.readVmi('testvm');
    const watching = consoleOf();
    t.teardown(() => watching.kill());
    await watching.connected;
    const secondBoot = watching.waitFor(GUEST_BOOT_MARKER, BOOT_DEADLINE_MS);
    t.match(
      await virtctl(['soft-reboot', 'testvm']),
      { code: 0, stdout: /VMI testvm was scheduled to soft-reboot/ },
      'soft-reboot accepted',
    );
    t.match(await secondBoot, new RegExp(GUEST_BOOT_MARKER), 'the guest booted again');
    watching.detach();
    await watching.exited;
    const after = await vmiIs('Running', (v) => v.status?.phase === 'Running');
    t.equal(after.metadata.uid, before?.metadata.uid, 'the same VMI: a guest reboot, not a new VM');
  });

  await t.test('restart replaces the VMI', async (t) => {
    const before = (await kv.readVmi('testvm'))!.metadata.uid;
    t.match(await virtctl(['restart', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to restart/ }, 'restart accepted');
    const vmi = await vmiIs('a new VMI Running', (v) => v.metadata.uid !== before && v.status?.phase === 'Running', BOOT_DEADLINE_MS);
    t.not(vmi.metadata.uid, before, 'the VMI UID changed');
    await vmIs('Running', (v) => v.status?.printableStatus === 'Running');
  });

  await t.test('stop halts the VM and refuses what a stopped VM cannot do; start --paused starts it paused', async (t) => {
    t.match(await virtctl(['stop', 'testvm']), { code: 0, stdout: /VM testvm was scheduled to stop/ }, 'stop accepted');
    const stopped = await vmIs('Stopped', (v) => v.status?.printableStatus === 'Stopped', 120_000);
    await waitForGone(ns.vmi('testvm'), { deadlineMs: 120_000 });
    t.equal(stopped.spec.runStrategy, 'Halted', 'stop set runStrategy Halted');
    t.match(await virtctl(['stop', 'testvm']), { code: 1, stderr: /VM is not running/ }, 'a stopped VM cannot stop');
    t.match(
      await virtctl(['restart', 'testvm']),
      { code: 1, stderr: /RunStategy Halted does not support manual restart requests/ },
      'a Halted VM cannot restart',
    );
    t.match(
      await virtctl(['start', 'testvm', '--paused']),
      { code: 0, stdout: /VM testvm was scheduled to start/ },
      'start --paused accepted',
    );
    const vm = await vmIs('Paused', (v) => v.status?.printableStatus === 'Paused', BOOT_DEADLINE_MS);
    const vmi = await vmiIs('Running and paused', (v) => v.status?.phase === 'Running' && condition(v, 'Paused') === 'True');
    t.match(
      { runStrategy: vm.spec.runStrategy, phase: vmi.status?.phase },
      { runStrategy: 'Always', phase: 'Running' },
      'the controller set runStrategy Always; the VMI runs with its vCPUs paused',
    );
  });

  await t.test('a viewer cannot change a VM or attach to it', async (t) => {
    t.match(await virtctl(['unpause', 'vmi', 'testvm'], 'viewer'), { code: 1, stderr: /forbidden/i }, 'view cannot unpause');
    t.match(await virtctl(['stop', 'testvm'], 'viewer'), { code: 1, stderr: /forbidden/i }, 'view cannot stop');
    t.match(await virtctl(['start', 'othervm'], 'viewer', OTHER_NS), { code: 1, stderr: /forbidden/i }, 'nor start anything');
    const console = await virtctl(['console', 'testvm', '--timeout=1'], 'viewer');
    t.match(console, { code: 1, stderr: /403|forbidden/i }, 'view cannot open the console');
  });

  await t.test("the tenant cannot act on another namespace's VM, through the aggregator or at the node", async (t) => {
    t.match(await virtctl(['start', 'othervm'], 'tenant', OTHER_NS), { code: 1, stderr: /forbidden/i }, 'start elsewhere is forbidden');
    const direct = await nodeRequest(
      cluster.clients,
      NODE,
      agent.kubeletPort,
      `${OTHER_NS}/virtualmachineinstances/othervm/userlist`,
      tenantToken(tenant),
    );
    t.match(direct, { status: 403, body: /cannot|Forbidden/ }, "the node refuses the tenant another namespace's VMI");
  });

  await t.test('no credentials, or bad ones, are 401', async (t) => {
    const start = `/apis/subresources.kubevirt.io/v1/namespaces/${NS}/virtualmachines/testvm/start`;
    t.equal(
      await httpsStatus('PUT', `https://${address}:${api.port}${start}`, {}),
      401,
      'the subresource API itself: no front-proxy certificate',
    );
    const server = cluster.clients.kc.getCurrentCluster()!.server;
    t.equal(
      await httpsStatus('PUT', `${server}${start}`, { Authorization: 'Bearer not-a-token' }),
      401,
      'through the kube-apiserver: an invalid token',
    );
    const console = await nodeRequest(cluster.clients, NODE, agent.kubeletPort, `${NS}/virtualmachineinstances/testvm/userlist`);
    t.equal(console.status, 401, "the node's kubelet API: no credentials");
  });
});

/** A ServiceAccount bound to `view` in `namespace`, as clients. */
async function viewerOf(admin: KubeClients, namespace: string): Promise<KubeClients> {
  const clients = makeClients(admin.kc);
  await clients.core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'viewer' } } });
  await admin.kc.makeApiClient(RbacAuthorizationV1Api).createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: 'viewer-view' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'view' },
      subjects: [{ kind: 'ServiceAccount', name: 'viewer', namespace }],
    },
  });
  const issued = await clients.core.createNamespacedServiceAccountToken({
    name: 'viewer',
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const kc = new KubeConfig();
  const cluster = admin.kc.getCurrentCluster()!;
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: 'viewer', token: issued.status!.token }],
    contexts: [{ name: 'viewer', cluster: cluster.name, user: 'viewer', namespace }],
    currentContext: 'viewer',
  });
  return makeClients(kc);
}

const tenantToken = (tenant: KubeClients): string => tenant.kc.getCurrentUser()!.token!;

/** A GET on the node's kubelet API at a VMI subresource path (certificate unchecked: only the answer matters). */
async function nodeRequest(
  admin: KubeClients,
  node: string,
  port: number,
  path: string,
  token?: string,
): Promise<{ status: number; body: string }> {
  const n = await admin.core.readNode({ name: node });
  const host = n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host,
        port,
        path: `/apis/subresources.kubevirt.io/v1/namespaces/${path}`,
        headers: token ? { Authorization: `Bearer ${token}` } : {},
        rejectUnauthorized: false,
      },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** The status code of a request with an empty JSON body (server certificates not checked: only the code matters). */
function httpsStatus(method: string, url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: { ...headers, 'Content-Type': 'application/json' }, rejectUnauthorized: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end('{}');
  });
}

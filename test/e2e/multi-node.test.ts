// Every multi-node e2e on one `vkvm up --nodes 2 --container-nodes 1`: two vkvm
// nodes (node 2 a simulated host joined through vkvm join) and an ordinary
// kubelet node. Starting and stopping a cluster per file cost about a minute
// each; the suites below run in turn on this one, each in a namespace of its
// own that is gone before the next starts, so none sees another's VMs.
// After Ctrl-C, the machine is as it was before.
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { freePort } from '../../deploy/cluster/cluster.js';
import { DEFAULT_NODES_CIDR, segmentOf } from '../../provider/local-cluster/layout.js';
import { leftSince } from '../helpers/leftovers.js';
import { machineFootprint } from '../helpers/machine-footprint.js';
import { poll, startUpCluster, type UpCluster } from './framework/index.js';
import { containerNodesSuite } from './multi-node/container-nodes.js';
import { drainSuite } from './multi-node/drain.js';
import { migrationApiSuite } from './multi-node/migration-api.js';
import { nodesSuite } from './multi-node/nodes.js';
import { leaveVmsWithVolumes } from './multi-node/volumes-at-stop.js';

// The suites' sum: longer than one file's default.
t.setTimeout(1_800_000);

/** Deletes the suites' namespaces (`e2e-*`) and waits until they are gone, with every VM in them. */
async function endSuiteNamespaces(up: UpCluster): Promise<void> {
  const ours = async () => (await up.clients.core.listNamespace()).items.map((n) => n.metadata!.name!).filter((n) => n.startsWith('e2e-'));
  for (const name of await ours()) await up.clients.core.deleteNamespace({ name }).catch(() => undefined);
  await poll('the suite’s namespaces gone', ours, (left) => left.length === 0, { deadlineMs: 180_000, intervalMs: 1000 });
}

/** The VM and VMI controllers' failed syncs logged so far: a few backing off, never one every few ms. */
const failedVmSyncs = (up: UpCluster): number =>
  up.output.filter((l) => /"component":"vmi?-controller"/.test(l) && l.includes('"msg":"sync failed; will retry"')).length;

/** A log line of a request the API server refused vkvm up's controllers, user vkvm:controllers (deploy/up-controllers.yaml). */
const refusedAsControllers = (line: string): boolean => /User \\*"vkvm:controllers\\*" cannot/.test(line);

t.test('vkvm up --nodes 2 --container-nodes 1, shared by the multi-node suites; nothing left after Ctrl-C', async (t) => {
  const before = await machineFootprint({ stateDir: '/nonexistent', bridge: 'vkn-none' });
  // hostDisks are off unless the operator names a directory for them.
  const disks = await mkdtemp(join(tmpdir(), 'vkvm-e2e-multi-disks-'));
  await chmod(disks, 0o755);
  t.teardown(() => rm(disks, { recursive: true, force: true }));
  // A registry on this host's segment address, which every node reaches: node 1 as its own address, so it is listed as
  // local; both speak plain HTTP to it. The nodes suite starts it for KubeVirt's storage examples.
  const examplesRegistry = `${segmentOf(DEFAULT_NODES_CIDR).hostAddress}:${await freePort()}`;
  const up: UpCluster = await startUpCluster(t, {
    nodes: 2,
    containerNodes: 1,
    nodeName: 'vkvm-e2e-multi',
    extraArgs: [`--host-disk-dir=${disks}`, `--local-registry=${examplesRegistry}`, `--insecure-registry=${examplesRegistry}`],
  });

  await t.test('two vkvm nodes: Ready, VMs on both talking by pod IP unNATed, node-scoped identities, claims provisioned per node', (t) =>
    nodesSuite(t, up, { examplesRegistry }),
  );
  await endSuiteNamespaces(up);
  await t.test('a kubelet node with containerd and flannel runs toolbox pods; Services and DNS reach VMs', (t) =>
    containerNodesSuite(t, up),
  );
  await endSuiteNamespaces(up);
  await t.test('kubectl drain: None evicts, LiveMigrate blocks with the reason or evacuates, uncordon cancels', (t) =>
    drainSuite(t, up, disks),
  );
  await endSuiteNamespaces(up);
  await t.test('live migration API: virtctl migrate and migrate-cancel, the migrate role, admission', (t) =>
    migrationApiSuite(t, up, disks),
  );
  // Each suite's namespace was deleted under VMs that run Always: their VMI creates were refused, and not retried hot.
  const failed = failedVmSyncs(up);
  t.same({ hotLoop: failed >= 20 }, { hotLoop: false }, `the VM and VMI controllers logged ${failed} failed syncs in all`);
  // Not as admin: the roles `vkvm controllers` is given on a joined cluster cover all the suites made them do.
  t.same(up.output.filter(refusedAsControllers), [], 'the API server refused the controllers nothing');

  await t.test('Ctrl-C stops every node and the control plane; the machine is as before', async (t) => {
    const cnode = up.nodes.find((n) => n.container)!;
    await leaveVmsWithVolumes(t, up);
    const loops = (await machineFootprint(up))['loop device']!.length - before['loop device']!.length;
    t.ok(loops >= 2, `their Block volumes hold ${loops} loop devices`);
    t.same(await up.interrupt(), [], 'vkvm up, its nodes and its control plane exit');
    t.same(
      up.output.filter((l) => l.startsWith('vkvm: ') && !l.startsWith('vkvm: nodes ')),
      [],
      'without an error',
    );
    t.notOk(existsSync(cnode.simulated!.rootDir), 'the container node’s state dir (containerd, kubelet) is gone');
    t.notOk(existsSync(cnode.simulated!.runDir), 'its run dir is gone');
    t.same(
      leftSince(before, await machineFootprint(up)),
      [],
      'no process, mount, loop device, namespace, link, route, cgroup, rule, lease or container daemon left',
    );
  });
});

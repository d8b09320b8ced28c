// Nothing left behind: ten create/delete cycles on the real control plane
// (plain pods and KubeVirt VMIs, bridged and masquerade, deleted gracefully
// or forced, once Running or while starting), then the agent's footprint is
// what it was before them: no process, cgroup, network namespace, bridge
// port, nftables chain, iptables rule, IPAM address, DHCP entry or lease,
// socket, file or Kubernetes object more. The 200-cycle audit with the
// agent's memory is `npm run bench -- leaks`; both use test/helpers/leftovers.ts.
import { randomUUID } from 'node:crypto';
import { access, mkdir, readdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { run } from '../../provider/network/host.js';
import { kubeFootprint, leftSince, settledFootprint, type AuditedAgent } from '../helpers/leftovers.js';
import { CYCLE_MIX, runCycle, runCycles } from './framework/vm-cycles.js';
import {
  pidsWhere,
  pods,
  poll,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-leaks';
const NS = 'e2e-leaks';
const CYCLES = CYCLE_MIX.length;

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );
/** Launcher processes of one VM, by `--uid <uid>` on their command line. */
const launcherPids = (uid: string) => pidsWhere((argv) => argv.some((a, i) => a === '--uid' && argv[i + 1] === uid));

/** Until the agent has torn down every VM (a forced deletion's teardown goes on after the pod is gone). */
const drained = (a: AuditedAgent) =>
  poll(
    'the agent to remove every VM',
    async () => [
      ...(await readdir(join(a.stateDir, 'vms')).catch(() => [])),
      ...(await readdir(join(a.stateDir, 'network', 'vms')).catch(() => [])),
    ],
    (left) => left.length === 0,
    { deadlineMs: 120_000 },
  );

t.test('create/delete cycles of every kind leave nothing behind', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  const agent = await startAgent(t, cluster, { nodeName: NODE });
  await testNamespace(t, cluster, NS);
  const env = { clients: cluster.clients, namespace: NS, node: NODE };
  const audited: AuditedAgent = { stateDir: agent.stateDir, runDir: join(agent.stateDir, 'run'), bridge: agent.bridge };

  // What the first VM makes for every later one (the network's VM directory, the DHCP log) is not a leak.
  await runCycle(env, 'warmup', CYCLE_MIX[0]!);
  await drained(audited);
  const before = await settledFootprint(audited);

  const done = await runCycles(env, { count: CYCLES, concurrency: 2, prefix: 'leak' });
  t.same(
    done.map((r) => r.kind).sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))),
    [...CYCLE_MIX].sort((a, b) => JSON.stringify(a).localeCompare(JSON.stringify(b))),
    'every kind of cycle ran once',
  );
  await drained(audited);
  const left = [...leftSince(before, await settledFootprint(audited)), ...leftSince({}, await kubeFootprint(cluster.clients, NS))];
  t.same(left, [], `nothing of ${CYCLES} VMs is left:\n${left.join('\n')}`);

  await t.test('a pod deleted while its launcher spawns: once the pod is gone, so is its VM, with no wait for the repair', async (t) => {
    const pod = await cluster.clients.core.createNamespacedPod({
      namespace: NS,
      body: testGuestPod({ name: 'racer', node: NODE, terminationGracePeriodSeconds: 1 }),
    });
    const uid = pod.metadata!.uid!;
    // The agent makes the VM's directory right before it spawns the launcher, which takes a few hundred ms to answer.
    await poll('the agent to begin starting the VM', () => exists(join(audited.stateDir, 'vms', uid)), Boolean, { intervalMs: 10 });
    await cluster.clients.core.deleteNamespacedPod({ name: 'racer', namespace: NS });
    await waitForGone(pods(cluster.clients, NS, { name: 'racer' }), { deadlineMs: 120_000 });
    t.same(
      { qemu: qemuPidsOf(uid), launchers: launcherPids(uid), dir: await exists(join(audited.stateDir, 'vms', uid)) },
      { qemu: [], launchers: [], dir: false },
      'no QEMU, no launcher and no directory of it',
    );
  });

  await t.test('the audit sees a leak of each kind it plants', async (t) => {
    const uid = randomUUID();
    const file = join(audited.stateDir, 'vms', uid, 'console.log');
    const cgroup = `/sys/fs/cgroup/pids/vkvm/${uid}`;
    const netns = `vkvm-${uid}`;
    t.teardown(async () => {
      await rm(join(audited.stateDir, 'vms', uid), { recursive: true, force: true });
      await rmdir(cgroup).catch(() => undefined);
      await run(['ip', 'netns', 'del', netns]).catch(() => undefined);
    });
    await mkdir(join(audited.stateDir, 'vms', uid));
    await writeFile(file, '');
    await mkdir(cgroup);
    await run(['ip', 'netns', 'add', netns]);
    t.same(
      leftSince(before, await settledFootprint(audited)),
      [`cgroup: pids/vkvm/${uid}`, `network namespace: ${netns}`, `file: ${join(audited.stateDir, 'vms', uid)}`, `file: ${file}`],
      'a VM directory, a cgroup and a namespace nobody removed are each named',
    );
  });
});

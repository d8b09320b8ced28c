// Faults between a node and the API server, on the real control plane with
// real VMs: the agent's watch going half-open, and the API server down for a
// minute (killed, and started again by vkvm-cluster up). The agent reaches
// the API server through a TCP proxy the test controls. Each subtest states
// what must hold. Two VMs, because guests are TCG-slow on these hosts: a
// plain pod on the bridge and a KubeVirt VM behind masquerade; a third, short
// one is created while the watch is half-open.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import {
  agentLogLines,
  apiServerPids,
  condition,
  isRunningAndReady,
  kubevirtIn,
  leases,
  NO_TRACES,
  nodes,
  poll,
  smokeVm,
  startAgent,
  startTestCluster,
  takeApiServerDown,
  testGuestPod,
  testLog,
  testNamespace,
  untilTraces,
  vmProcess,
  waitFor,
  waitForGone,
} from './framework/index.js';
import { recordChanges } from './framework/recorder.js';
import { apiServerOf, startTcpProxy, writeKubeconfigVia } from './framework/tcp-proxy.js';

// Short: the agent's state dir, named after it, holds the launchers' unix sockets (108 bytes at most).
const NODE = 'vkvm-e2e-apif';
const NS = 'e2e-api-faults';
const BOOT_DEADLINE_MS = 180_000;
/** Short, so the half-open watch is noticed within the test: healthy quiet watches restart as often, harmlessly. */
const PROGRESS_DEADLINE_S = 10;
const OUTAGE_MS = 60_000;
/** Longer than the outage plus the API server's start: the node must come through it Ready. */
const NODE_MONITOR_GRACE_PERIOD_S = 120;
const QEMU = 'qemu-system';

t.test('faults between the node and the API server', async (t) => {
  const cluster = await startTestCluster(t, { nodeMonitorGracePeriodS: NODE_MONITOR_GRACE_PERIOD_S });
  await installClusterManifests(cluster.kubeconfigPath);
  // Errors only: while the API server is away their every retry would warn.
  const controllers = startControllers(cluster.clients, testLog.child({}, { level: 'error' }), { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  const proxy = await startTcpProxy(t, apiServerOf(cluster.kubeconfigPath));
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-api-faults-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const kubeconfigPath = join(dir, 'kubeconfig');
  await writeKubeconfigVia(cluster.kubeconfigPath, proxy, kubeconfigPath);
  const agent = await startAgent(
    t,
    { kubeconfigPath },
    { nodeName: NODE, extraArgs: [`--watch-progress-deadline=${PROGRESS_DEADLINE_S}s`] },
  );
  const ns = await testNamespace(t, cluster, NS);
  const kv = kubevirtIn(ns);
  const runningPod = (name: string, restartCount = 0) =>
    waitFor(ns.pod(name), (p) => isRunningAndReady(p) && p.status?.containerStatuses?.[0]?.restartCount === restartCount, {
      what: `Running and Ready after ${restartCount} restarts`,
      deadlineMs: BOOT_DEADLINE_MS,
    });
  const runningVmi = () =>
    waitFor(ns.vmi('kv'), (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
      what: 'Running and Ready',
      deadlineMs: BOOT_DEADLINE_MS,
    });

  await ns.createPod(testGuestPod({ name: 'steady', node: NODE, terminationGracePeriodSeconds: 5 }));
  await kv.createVm(smokeVm('kv'));
  await Promise.all([runningPod('steady'), runningVmi()]);

  await t.test('watch half-open: noticed by the progress deadline; a pod created meanwhile still starts', async (t) => {
    t.ok(proxy.freeze() > 0, 'the agent’s open connections (its watches) pass nothing from now on');
    await ns.createPod(testGuestPod({ name: 'late', node: NODE, restartPolicy: 'Never', terminationGracePeriodSeconds: 0 }));
    const late = await runningPod('late');
    t.equal(late.spec?.nodeName, NODE, 'the pod bound while the watch was silent runs as a VM');
    t.ok(
      agentLogLines(agent, 'list/watch failed; restarting it').some((l) =>
        /delivered nothing \(not even a bookmark\)/.test((l.err as { message?: string } | undefined)?.message ?? ''),
      ),
      'the agent said its watch had gone silent',
    );
    await ns.kubectl(['delete', 'pod', 'late', '--grace-period=0', '--force']);
    await waitForGone(ns.pod('late'), { what: 'deleted' });
  });

  await t.test('API server down a minute: VMs keep running, nothing deleted, statuses catch up, the node stays Ready', async (t) => {
    const node = await recordChanges(t, nodes(cluster.clients, { name: NODE }));
    const launcherPod = async () => {
      const pods = (await cluster.clients.core.listNamespacedPod({ namespace: NS, labelSelector: 'kubevirt.io=virt-launcher' })).items;
      if (pods.length !== 1) throw new Error(`want one launcher pod, found ${pods.length}`);
      return pods[0]!;
    };
    const steadyUid = (await ns.readPod('steady')).metadata!.uid!;
    const kvPodUid = (await launcherPod()).metadata!.uid!;
    const before = {
      steady: steadyUid,
      vmi: (await kv.readVmi('kv'))!.metadata.uid,
      kvPod: kvPodUid,
      kvQemu: await vmProcess(kvPodUid, QEMU),
    };
    const steadyQemu = await vmProcess(steadyUid, QEMU);
    const leaseBefore = (await cluster.clients.coordination.readNamespacedLease({ name: NODE, namespace: 'kube-node-lease' })).spec
      ?.renewTime;

    const outage = takeApiServerDown(cluster, OUTAGE_MS);
    await poll(
      'the API server gone',
      async () => apiServerPids(cluster),
      (pids) => pids.length === 0,
      { intervalMs: 100 },
    );
    // While it is away a VM dies: the agent restarts it on its own, and its status must catch up afterwards.
    process.kill(steadyQemu, 'SIGKILL');
    const { killed } = await outage;
    await poll(
      'a new API server answering',
      () => cluster.clients.core.readNamespace({ name: NS }).then(() => true),
      (ok) => ok,
      { deadlineMs: 120_000, intervalMs: 1000 },
    );
    t.notSame(apiServerPids(cluster), killed, 'vkvm-cluster up started a new API server');

    const steady = await runningPod('steady', 1);
    t.match(
      steady.status?.containerStatuses?.[0]?.lastState?.terminated,
      { message: 'QEMU exited unexpectedly' },
      'the VM that died during the outage was restarted, and its status caught up',
    );
    await waitFor(
      leases(cluster.clients, 'kube-node-lease', { name: NODE }),
      (l) => new Date(l.spec?.renewTime ?? 0).getTime() > new Date(leaseBefore ?? 0).getTime() + OUTAGE_MS,
      { what: 'renewed after the outage' },
    );
    const vmi = await runningVmi();
    const kvPod = await launcherPod();
    t.same(
      { steady: steady.metadata?.uid, vmi: vmi.metadata.uid, kvPod: kvPod.metadata?.uid, kvQemu: await vmProcess(kvPodUid, QEMU) },
      before,
      'nothing was deleted or replaced: the same pods and VMI, the VMI on the same QEMU (and the lease renewed)',
    );
    const seen = node.seen();
    t.same(
      {
        notReady: seen.filter((n) => condition(n, 'Ready') !== 'True').map((n) => n.status?.conditions),
        evictionTaints: seen.flatMap((n) => n.spec?.taints ?? []).filter((taint) => taint.effect === 'NoExecute'),
      },
      { notReady: [], evictionTaints: [] },
      'the node was never NotReady or Unknown, and never tainted for eviction',
    );

    // The agent watches again: a pod deleted now has its VM stopped and its pod released.
    await ns.kubectl(['delete', 'pod', 'steady', '--wait=false']);
    await waitForGone(ns.pod('steady'), { what: 'deleted by the agent after its VM stopped', deadlineMs: 60_000 });
    t.same(await untilTraces(agent, steadyUid, NO_TRACES), NO_TRACES, 'and nothing of it is left on the host');
  });
});

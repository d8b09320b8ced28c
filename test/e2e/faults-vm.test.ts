// Faults in the processes that run VMs, on the real control plane with real
// launchers, libvirt and QEMU: a launcher, a libvirtd and a QEMU killed with
// SIGKILL, and a simulated host reboot. Each subtest states what must hold.
// Three VMs, because guests are TCG-slow on these hosts and each fault costs a
// boot: a plain pod on the bridge (restartPolicy Always), a plain pod behind
// masquerade (restartPolicy Never), and a KubeVirt VM (masquerade,
// runStrategy Always). The subtests follow them through their lives in order.
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { CREATED_BY_LABEL } from '../../provider/controllers/launcher-pod.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import {
  condition,
  isRunning,
  isRunningAndReady,
  kubevirtIn,
  launcherPidOf,
  NO_TRACES,
  poll,
  processesInCgroupOf,
  restartAgent,
  simulateReboot,
  smokeVm,
  startAgent,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  untilTraces,
  vmProcess,
  waitFor,
  waitForGone,
  type AgentProcess,
} from './framework/index.js';
import { recordChanges } from './framework/recorder.js';

const NODE = 'vkvm-e2e-faults';
const NS = 'e2e-faults';
const BOOT_DEADLINE_MS = 180_000;
/** "Within seconds": the kernel's death signals, not a sweep, must take the processes down. */
const DIES_WITHIN_MS = 10_000;
const QEMU = 'qemu-system';

t.test('faults in the processes that run VMs', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  // Agents belong to this test: a subtest's teardown would stop the restarted one early.
  const root = t;
  let agent: AgentProcess = await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const kv = kubevirtIn(ns);
  const vmis = await recordChanges(t, ns.vmis());
  const launcherPods = await recordChanges(t, ns.pods({ labelSelector: 'kubevirt.io=virt-launcher' }));

  const uidOf = async (pod: string): Promise<string> => (await ns.readPod(pod)).metadata!.uid!;
  const launcherPodOf = async (vmi: VirtualMachineInstance): Promise<V1Pod> => {
    const pods = await cluster.clients.core.listNamespacedPod({ namespace: NS, labelSelector: `${CREATED_BY_LABEL}=${vmi.metadata.uid}` });
    if (pods.items.length !== 1) throw new Error(`want one launcher pod of VMI ${vmi.metadata.uid}, found ${pods.items.length}`);
    return pods.items[0]!;
  };
  /** The VM's VMI once Running and Ready, if `replacing` is given a new one (another UID). */
  const runningVmi = (replacing?: string) =>
    waitFor(ns.vmi('kv'), (v) => v.metadata.uid !== replacing && v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
      what: replacing ? `a new VMI (not ${replacing}) Running and Ready` : 'Running and Ready',
      deadlineMs: BOOT_DEADLINE_MS,
    });
  /** The VMI's run as the recorder saw it end. */
  const lastPhaseOf = async (vmiUid: string) =>
    poll(
      `VMI ${vmiUid} recorded in a final phase`,
      async () =>
        vmis
          .seen()
          .filter((v) => v.metadata.uid === vmiUid)
          .map((v) => v.status?.phase)
          .pop(),
      (phase) => phase === 'Failed' || phase === 'Succeeded',
      { deadlineMs: 60_000 },
    );
  /** How a launcher pod's run ended, as the recorder saw it (the pod goes with its VMI soon after). */
  const lastTerminationOf = async (podUid: string) =>
    poll(
      `launcher pod ${podUid} recorded terminated`,
      async () =>
        launcherPods
          .seen()
          .filter((p) => p.metadata?.uid === podUid)
          .map((p) => p.status?.containerStatuses?.[0]?.state?.terminated)
          .pop(),
      (terminated) => terminated !== undefined,
      { deadlineMs: 60_000 },
    );
  const runningPod = (name: string, restartCount: number) =>
    waitFor(ns.pod(name), (p) => isRunningAndReady(p) && p.status?.containerStatuses?.[0]?.restartCount === restartCount, {
      what: `Running and Ready after ${restartCount} restarts`,
      deadlineMs: BOOT_DEADLINE_MS,
    });
  const allQemuGone = (pids: number[]) =>
    poll(
      `QEMU ${pids.join(', ')} gone`,
      async () => pids.filter(isRunning),
      (left) => left.length === 0,
      { deadlineMs: DIES_WITHIN_MS, intervalMs: 100 },
    ).catch(() => pids.filter(isRunning));
  const cgroupEmpty = (uid: string) =>
    poll(
      `cgroup of ${uid} empty`,
      () => processesInCgroupOf(uid),
      (left) => left.length === 0,
      { deadlineMs: DIES_WITHIN_MS, intervalMs: 100 },
    ).catch(() => processesInCgroupOf(uid));

  await ns.createPod(testGuestPod({ name: 'bridged', node: NODE, terminationGracePeriodSeconds: 5 }));
  await ns.createPod(
    testGuestPod({
      name: 'masq',
      node: NODE,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      annotations: { 'vkvm.io/pod-network': 'masquerade' },
    }),
  );
  await kv.createVm(smokeVm('kv'));
  await Promise.all([runningPod('bridged', 0), runningPod('masq', 0), runningVmi()]);

  await t.test('launcher kill -9: QEMU dies with it; the pod restarts saying so; the VMI fails and runStrategy restarts it', async (t) => {
    const vmi = (await kv.readVmi('kv'))!;
    const victims = [await uidOf('bridged'), (await launcherPodOf(vmi)).metadata!.uid!];
    const before = await Promise.all(
      victims.map(async (uid) => ({ launcher: await launcherPidOf(agent, uid), qemu: await vmProcess(uid, QEMU) })),
    );
    for (const b of before) process.kill(b.launcher, 'SIGKILL');

    t.same(await allQemuGone(before.map((b) => b.qemu)), [], 'each QEMU died with its launcher, within seconds');
    t.same(
      await Promise.all(victims.map(cgroupEmpty)),
      [[], []],
      'nothing of either VM is left running (libvirtd, virsh, the namespace init)',
    );

    const bridged = await runningPod('bridged', 1);
    const backOff = await waitFor(ns.eventsOf(victims[0]!), (e) => e.reason === 'BackOff', { what: 'the BackOff event' });
    t.match(
      { lastState: bridged.status?.containerStatuses?.[0]?.lastState, backOff: backOff.message },
      {
        lastState: { terminated: { reason: 'Error', message: /launcher pid \d+ died/ } },
        backOff: /^Back-off \d+s restarting stopped VM \(LauncherDied\)$/,
      },
      'restartPolicy Always: restarted, with the launcher’s death as the last termination and in the BackOff event',
    );
    t.not(await vmProcess(victims[0]!, QEMU), before[0]!.qemu, 'a new QEMU runs the pod');

    t.equal(await lastPhaseOf(vmi.metadata.uid!), 'Failed', 'the VMI whose launcher died went Failed');
    t.match(await lastTerminationOf(victims[1]!), { message: /launcher pid \d+ died/ }, 'its launcher pod said why');
    const next = await runningVmi(vmi.metadata.uid);
    t.not(next.metadata.uid, vmi.metadata.uid, 'runStrategy Always: the VM started a new VMI');
    await waitForGone(ns.pods({ labelSelector: `${CREATED_BY_LABEL}=${vmi.metadata.uid}` }), { what: 'the old launcher pod deleted' });
    t.same(await untilTraces(agent, victims[1]!, NO_TRACES), NO_TRACES, 'nothing of the failed VMI’s VM is left on the host');
  });

  await t.test('libvirtd and QEMU kill -9: the VM fails with a reason, restarted per policy, nothing leaked', async (t) => {
    const masqUid = await uidOf('masq');
    const vmi = (await kv.readVmi('kv'))!;
    const kvPodUid = (await launcherPodOf(vmi)).metadata!.uid!;
    const qemus = [await vmProcess(masqUid, QEMU), await vmProcess(kvPodUid, QEMU)];
    process.kill(await vmProcess(masqUid, 'libvirtd'), 'SIGKILL');
    process.kill(qemus[1]!, 'SIGKILL');
    t.same(await allQemuGone(qemus), [], 'the QEMU under the killed libvirtd died too');

    const masq = await waitFor(ns.pod('masq'), (p) => p.status?.phase === 'Failed', { what: 'Failed' });
    t.match(
      masq.status?.containerStatuses?.[0],
      { restartCount: 0, state: { terminated: { reason: 'Error', message: 'libvirtd was killed by SIGKILL; QEMU went with it' } } },
      'restartPolicy Never: Failed, not restarted, the message naming libvirtd',
    );
    t.same(
      await untilTraces(agent, masqUid, { ...NO_TRACES, vmDir: true }),
      { ...NO_TRACES, vmDir: true },
      'nothing of the finished VM runs or holds the network; only its directory (console logs) stays until the pod goes',
    );

    t.equal(await lastPhaseOf(vmi.metadata.uid!), 'Failed', 'the VMI whose QEMU was killed went Failed');
    t.match(
      await lastTerminationOf(kvPodUid),
      { reason: 'Error', message: 'QEMU exited unexpectedly' },
      'its launcher pod said why: QEMU stopped',
    );
    await runningVmi(vmi.metadata.uid);
    await waitForGone(ns.pods({ labelSelector: `${CREATED_BY_LABEL}=${vmi.metadata.uid}` }), { what: 'the old launcher pod deleted' });
    t.same(await untilTraces(agent, kvPodUid, NO_TRACES), NO_TRACES, 'nothing of the failed VMI’s VM is left on the host');
  });

  await t.test('host reboot: every pod realized again per restartPolicy, the VMI replaced, nothing of the old boot left', async (t) => {
    const bridgedUid = await uidOf('bridged');
    const masqUid = await uidOf('masq');
    const vmi = (await kv.readVmi('kv'))!;
    const kvPodUid = (await launcherPodOf(vmi)).metadata!.uid!;
    const oldQemu = await vmProcess(bridgedUid, QEMU);
    const launchers = await simulateReboot(agent);
    t.equal(launchers.length, 2, 'two launchers ran (the finished pod has none)');
    agent = await restartAgent(root, cluster, agent);

    const bridged = await runningPod('bridged', 2);
    t.match(
      bridged.status?.containerStatuses?.[0]?.lastState?.terminated,
      { reason: 'Error', message: /launcher pid \d+ died/ },
      'restartPolicy Always: the pod runs again, its last run ended by the reboot',
    );
    t.equal(await lastPhaseOf(vmi.metadata.uid!), 'Failed', 'the VMI of the old boot went Failed');
    await runningVmi(vmi.metadata.uid);
    await waitForGone(ns.pods({ labelSelector: `${CREATED_BY_LABEL}=${vmi.metadata.uid}` }), { what: 'the old launcher pod deleted' });
    const masq = await ns.readPod('masq');
    t.match(
      { phase: masq.status?.phase, restartCount: masq.status?.containerStatuses?.[0]?.restartCount },
      { phase: 'Failed', restartCount: 0 },
      'restartPolicy Never: the finished pod stays Failed and is not realized again',
    );
    t.same(
      {
        oldLaunchers: launchers.filter(isRunning),
        oldQemu: isRunning(oldQemu),
        bridged: (await processesInCgroupOf(bridgedUid)).filter((p) => p.startsWith(QEMU)).length,
        masq: await untilTraces(agent, masqUid, { ...NO_TRACES, vmDir: true }),
        oldVmi: await untilTraces(agent, kvPodUid, NO_TRACES),
      },
      { oldLaunchers: [], oldQemu: false, bridged: 1, masq: { ...NO_TRACES, vmDir: true }, oldVmi: NO_TRACES },
      'nothing of the old boot is left: its launchers and QEMUs are gone, one QEMU runs the restarted pod, and the replaced VMI’s VM left nothing',
    );
  });
});

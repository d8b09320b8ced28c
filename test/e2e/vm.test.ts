// KubeVirt's documentation smoke VM (its demo image served by the test guest)
// runs on the real control plane with a node agent as a VM → VMI → launcher
// pod → QEMU; run strategies stop and start it; deleting the VM lets the real
// garbage collector remove VMI and pod, and the VM stops. On the way: the
// guest agent's report on the VMI, and pause/unpause by the documented
// annotation, across an agent restart. The subtests up to the VM's deletion
// follow one VM through its life; the storage and error cases have their own,
// among them volumes the node cannot provide, refused rather than dropped.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { memoryLimitMiB } from '../../launcher/limits.js';
import { pluginRegistryDirOf, registrationSocketIn } from '../../provider/csi-node/registry-dir.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import {
  condition,
  kubevirtIn,
  pidsWhere,
  poll,
  qemuPidsOfDomain,
  restartAgent,
  smokeVm,
  smokeVmiSpec,
  startAgent,
  startTestCluster,
  testLog,
  testNamespace,
  vmiOf,
  waitFor,
  waitForAll,
  waitForGone,
  type AgentProcess,
  type TestCluster,
  type TestNamespace,
} from './framework/index.js';
import { csiClient, startDriverProcess } from '../helpers/csi-driver.js';
import { loopDevicesUnder, mountsUnder, removeScratch } from '../helpers/csi-leftovers.js';

const NODE = 'vkvm-e2e-vm';
const NS = 'e2e-vm';
// As the node operator: images under the missing-image directory, and hostDisks in the temp dir the storage case makes.
const AGENT_ARGS = ['--host-image-dir=/var/lib/vkvm-e2e-missing', `--host-disk-dir=${tmpdir()}`];
const BOOT_DEADLINE_MS = 180_000;
const LAUNCHER_PODS = { labelSelector: 'kubevirt.io=virt-launcher' };

/** This test's QEMU processes: its domains are named <namespace>_<vmi>. */
const testQemuPids = (): number[] => qemuPidsOfDomain(`${NS}_`);

t.test('the KubeVirt smoke VM runs on the node', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  let agent = await startAgent(t, cluster, { nodeName: NODE, extraArgs: AGENT_ARGS });
  const root = t;
  const ns = await testNamespace(t, cluster, NS);
  const kv = kubevirtIn(ns);
  const launcherPods = async (): Promise<V1Pod[]> =>
    (await cluster.clients.core.listNamespacedPod({ namespace: NS, ...LAUNCHER_PODS })).items;
  const setRunStrategy = (runStrategy: string) => kv.patchVm('testvm', { spec: { runStrategy } });
  const vmRunning = (vm: VirtualMachine) => vm.status?.printableStatus === 'Running' && vm.status.ready === true;
  const running = async (): Promise<{ vm: VirtualMachine; vmi: VirtualMachineInstance }> => {
    const vm = await waitFor(ns.vm('testvm'), vmRunning, { what: 'Running and ready', deadlineMs: BOOT_DEADLINE_MS });
    const vmi = await waitFor(ns.vmi('testvm'), (v) => v.status?.phase === 'Running', { what: 'Running' });
    return { vm, vmi };
  };

  await t.test('runStrategy Always: VM Running, VMI Running on the node, launcher pod owned by the VMI', async (t) => {
    await kv.createVm(smokeVm());
    const { vm, vmi } = await running();
    t.match({ ready: vm.status?.ready, nodeName: vmi.status?.nodeName }, { ready: true, nodeName: NODE }, 'VM ready, VMI on the vkvm node');
    const [pod] = await launcherPods();
    t.match(
      pod?.metadata?.ownerReferences,
      [{ kind: 'VirtualMachineInstance', name: 'testvm', uid: vmi.metadata.uid, controller: true }],
      'the launcher pod is owned by the VMI',
    );
    // The request covers what the launcher's cgroup allows on this node: more under TCG (as on this workplace's machines),
    // and the video memory of its VNC display.
    const accelerator = (await cluster.clients.core.readNode({ name: NODE })).metadata?.labels?.['vkvm.io/virtualization'] as 'kvm' | 'tcg';
    t.equal(
      pod?.spec?.containers[0]?.resources?.requests?.memory,
      `${memoryLimitMiB({ memoryMiB: 128, cpu: { sockets: 1, cores: 1, threads: 1 }, vnc: true }, accelerator)}Mi`,
      `the launcher pod requests the memory its cgroup gets under ${accelerator}`,
    );
    t.equal(testQemuPids().length, 1, 'one QEMU runs');
    const table = await ns.kubectl(['get', 'vm,vmi']);
    t.comment(table.stdout);
    t.match(table.stdout, /^virtualmachine\.kubevirt\.io\/testvm\s+\S+\s+Running\s+True/m, 'kubectl get vm: STATUS Running, READY True');
    const ip = pod?.status?.podIP ?? 'none';
    t.match(
      table.stdout,
      new RegExp(
        `^virtualmachineinstance\\.kubevirt\\.io/testvm\\s+\\S+\\s+Running\\s+${ip.replace(/\./g, '\\.')}\\s+${NODE}\\s+True`,
        'm',
      ),
      'kubectl get vmi: PHASE, IP, NODENAME, READY',
    );
    t.match(
      (await kv.readVmi('testvm'))?.status?.interfaces,
      [{ name: 'default', ipAddress: ip, ipAddresses: [ip], mac: vmi.spec.domain.devices?.interfaces?.[0]?.macAddress ?? /^52:54:00:/ }],
      'VMI interfaces: the pod IP and the MAC of the pod network interface',
    );
  });

  await t.test('the guest agent connects: VMI AgentConnected and guestOSInfo', async (t) => {
    const vmi = await waitFor(ns.vmi('testvm'), (v) => condition(v, 'AgentConnected') === 'True' && Boolean(v.status?.guestOSInfo), {
      what: 'AgentConnected with guestOSInfo',
    });
    // The test guest has no /etc/os-release: qemu-ga reports uname's fields.
    t.match(
      vmi.status?.guestOSInfo,
      { kernelRelease: /^\d+\.\d+\S*$/, kernelVersion: /^#/, machine: 'x86_64' },
      "guestOSInfo holds the guest agent's answer",
    );
  });

  await t.test('the vkvm.io/paused annotation pauses the VM; removed while the agent is down, the next agent unpauses it', async (t) => {
    const annotate = (value: string | null) => kv.patchVmi('testvm', { metadata: { annotations: { 'vkvm.io/paused': value } } });
    await annotate('true');
    const pausedVm = await waitFor(ns.vm('testvm'), (v) => v.status?.printableStatus === 'Paused', { what: 'Paused' });
    const pausedVmi = await kv.readVmi('testvm');
    t.match(
      {
        phase: pausedVmi?.status?.phase,
        paused: pausedVmi?.status?.conditions?.find((c) => c.type === 'Paused'),
        vm: pausedVm.status?.conditions?.find((c) => c.type === 'Paused'),
      },
      { phase: 'Running', paused: { status: 'True', reason: 'PausedByUser' }, vm: { status: 'True', reason: 'PausedByUser' } },
      'VMI Running with Paused True (PausedByUser), VM printableStatus Paused',
    );
    t.match(
      (await ns.kubectl(['get', 'vmi', 'testvm', '-o', 'wide'])).stdout,
      /^testvm\s.*\sTrue\s*$/m,
      'kubectl get vmi -o wide: PAUSED (the last column) True',
    );

    await agent.kill('SIGKILL');
    await annotate(null);
    agent = await restartAgent(root, cluster, agent);
    const resumedVm = await waitFor(ns.vm('testvm'), vmRunning, { what: 'Running and ready again' });
    const resumedVmi = await waitFor(ns.vmi('testvm'), (v) => condition(v, 'Paused') === undefined, { what: 'no Paused condition' });
    t.match(
      { vm: resumedVm, vmi: resumedVmi },
      { vm: { status: { printableStatus: 'Running', ready: true } }, vmi: { status: { phase: 'Running' } } },
      'the restarted agent unpaused it: VM Running, no Paused condition',
    );
    const events = await waitForAll(
      ns.eventsOf(resumedVmi.metadata.uid!),
      (es) => ['Paused', 'Unpaused'].every((r) => es.some((e) => e.reason === r)),
      {
        what: 'Paused and Unpaused',
      },
    );
    t.match(
      ['Paused', 'Unpaused'].map((reason) => events.find((e) => e.reason === reason)),
      [{ message: 'VirtualMachineInstance paused' }, { message: 'VirtualMachineInstance unpaused' }],
      'Paused and Unpaused events on the VMI',
    );
  });

  await t.test('runStrategy Halted stops it: VMI and QEMU gone, VM Stopped; Always again runs it', async (t) => {
    await setRunStrategy('Halted');
    const vm = await waitFor(ns.vm('testvm'), (v) => v.status?.printableStatus === 'Stopped', { what: 'Stopped', deadlineMs: 90_000 });
    await waitForGone(ns.vmi('testvm'), { deadlineMs: 90_000 });
    await waitForGone(ns.pods(LAUNCHER_PODS), { deadlineMs: 90_000 });
    await poll(
      'no QEMU of the VM',
      async () => testQemuPids(),
      (pids) => pids.length === 0,
      { deadlineMs: 30_000 },
    ).catch(() => undefined);
    const stopped = { vm, vmi: await kv.readVmi('testvm'), pods: (await launcherPods()).length, qemu: testQemuPids().length };
    t.match(
      stopped,
      { vm: { status: { printableStatus: 'Stopped' } }, vmi: undefined, pods: 0, qemu: 0 },
      'VM Stopped; no VMI, launcher pod or QEMU',
    );
    await setRunStrategy('Always');
    await running();
    t.equal(testQemuPids().length, 1, 'running again');
  });

  await t.test('a guestAgentPing liveness probe that fails kills the VM; runStrategy Always starts a new VMI', async (t) => {
    // The test guest's agent connects well within a minute under TCG; the probe waits that long, as users make theirs wait.
    const livenessProbe = { guestAgentPing: {}, initialDelaySeconds: 60, periodSeconds: 5, timeoutSeconds: 2, failureThreshold: 2 };
    await kv.patchVm('testvm', { spec: { template: { spec: { livenessProbe } } } });
    const before = await kv.readVmi('testvm');
    await kv.deleteVmi('testvm');
    const probed = await waitFor(
      ns.vmi('testvm'),
      (v) => v.metadata.uid !== before?.metadata.uid && condition(v, 'AgentConnected') === 'True',
      { what: 'a new VMI with the probe and its agent connected', deadlineMs: BOOT_DEADLINE_MS },
    );
    t.same(probed.spec.livenessProbe, livenessProbe, 'the new VMI carries the liveness probe');
    // The deleted VMI's pod may still be stopping beside the new one: the new VMI's own pod is the one probed.
    const pod = (await launcherPods()).find((p) => p.metadata?.ownerReferences?.some((o) => o.uid === probed.metadata.uid));
    t.ok(pod, "the new VMI's launcher pod");
    // The agent is stopped, not killed (init would respawn it), after this exec, which the agent itself runs, has returned.
    const stop = await ns.kubectl([
      'exec',
      pod!.metadata!.name!,
      '--',
      '/bin/sh',
      '-c',
      '(sleep 3; kill -STOP $(pidof qemu-ga)) </dev/null >/dev/null 2>&1 &',
    ]);
    t.equal(stop.code, 0, 'the guest agent is stopped in the guest');
    const next = await waitFor(ns.vmi('testvm'), (v) => v.metadata.uid !== probed.metadata.uid, {
      what: 'the VMI that replaces the killed one',
      deadlineMs: 180_000,
    });
    t.ok(next, 'runStrategy Always: the VM started a new VMI');
    const events = await waitForAll(ns.eventsOf(pod!.metadata!.uid!), (es) => es.some((e) => e.reason === 'Killing'), {
      what: 'the Killing event',
    });
    t.match(
      {
        unhealthy: events.find((e) => e.reason === 'Unhealthy')?.message,
        killing: events.find((e) => e.reason === 'Killing')?.message,
      },
      { unhealthy: /^Liveness probe failed: /, killing: /^VM failed its liveness probe; killing it/ },
      'the probe failure and the kill are events on the launcher pod',
    );
    await kv.patchVm('testvm', { spec: { template: { spec: { livenessProbe: null } } } });
  });

  await t.test('deleting the VM garbage-collects VMI and pod; launcher and QEMU are gone', async (t) => {
    await kv.deleteVm('testvm');
    await waitForGone(ns.vmi('testvm'), { deadlineMs: 90_000 });
    await waitForGone(ns.pods(LAUNCHER_PODS), { deadlineMs: 90_000 });
    await poll(
      'no QEMU of the VM',
      async () => testQemuPids(),
      (pids) => pids.length === 0,
      { deadlineMs: 30_000 },
    ).catch(() => undefined);
    const gone = { vmi: await kv.readVmi('testvm'), pods: (await launcherPods()).length, qemu: testQemuPids().length };
    t.same(gone, { vmi: undefined, pods: 0, qemu: 0 }, 'no VMI, launcher pod or QEMU');
    // This agent's launchers: other agents on the machine (other test files, other checkouts) have their own state dirs.
    const launchers = pidsWhere((argv) => argv.some((a) => a.includes('launcher/main.js')) && argv.some((a) => a.includes(agent.stateDir)));
    t.same(launchers, [], 'no launcher process of this agent');
  });
  await t.test(
    'a VMI with a filesystem PVC on a hostPath PV and a DiskOrCreate hostDisk runs; their images are created at their capacities',
    async (t) => {
      const dir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-storage-'));
      t.teardown(() => rm(dir, { recursive: true, force: true }));
      await chmod(dir, 0o755);
      const pvDir = join(dir, 'pv');
      await mkdir(pvDir, { mode: 0o755 });
      const pvName = `vkvm-e2e-pv-${randomBytes(3).toString('hex')}`;
      await cluster.clients.core.createPersistentVolume({
        body: {
          metadata: { name: pvName },
          spec: {
            capacity: { storage: '64Mi' },
            accessModes: ['ReadWriteOnce'],
            storageClassName: 'vkvm-e2e',
            hostPath: { path: pvDir },
            persistentVolumeReclaimPolicy: 'Retain',
          },
        },
      });
      t.teardown(() => cluster.clients.core.deletePersistentVolume({ name: pvName }).catch(() => undefined));
      await cluster.clients.core.createNamespacedPersistentVolumeClaim({
        namespace: NS,
        body: {
          metadata: { name: 'data' },
          spec: {
            accessModes: ['ReadWriteOnce'],
            storageClassName: 'vkvm-e2e',
            volumeName: pvName,
            resources: { requests: { storage: '64Mi' } },
          },
        },
      });
      const claim = await waitFor(ns.pvc('data'), (c) => c.status?.phase === 'Bound', { what: 'Bound' });
      t.equal(claim.spec?.volumeName, pvName, 'the claim is bound to the hostPath PV');
      const spec = smokeVmiSpec();
      spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } }, { name: 'scratch', disk: { bus: 'sata' } });
      spec.volumes!.push(
        { name: 'data', persistentVolumeClaim: { claimName: 'data' } },
        { name: 'scratch', hostDisk: { path: join(dir, 'scratch.img'), type: 'DiskOrCreate', capacity: '32Mi' } },
      );
      await kv.createVmi(vmiOf('storage', spec));
      const vmi = await waitFor(ns.vmi('storage'), (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
        what: 'Running and Ready',
        deadlineMs: BOOT_DEADLINE_MS,
      });
      t.equal(vmi.status?.nodeName, NODE, 'running on the node');
      const sizes = { pv: (await stat(join(pvDir, 'disk.img'))).size, hostDisk: (await stat(join(dir, 'scratch.img'))).size };
      t.same(
        sizes,
        { pv: 64 * 2 ** 20, hostDisk: 32 * 2 ** 20 },
        "the claim's disk.img at the claim's capacity, the hostDisk at its capacity",
      );
      const storageQemu = () => qemuPidsOfDomain(`${NS}_storage,`);
      const qemu = storageQemu();
      const argv = qemu.length ? readFileSync(`/proc/${qemu[0]}/cmdline`, 'utf8') : '';
      t.match(
        { pv: argv.includes(join(pvDir, 'disk.img')), hostDisk: argv.includes(join(dir, 'scratch.img')) },
        { pv: true, hostDisk: true },
        'QEMU has both files open as disks',
      );
      await kv.deleteVmi('storage');
      await waitForGone(ns.vmi('storage'), { deadlineMs: 90_000 });
      t.same(
        await poll(
          'the storage QEMU gone',
          async () => storageQemu(),
          (pids) => pids.length === 0,
          { deadlineMs: 90_000 },
        ).catch(() => storageQemu()),
        [],
        'the VM stopped with its VMI',
      );
      t.ok((await stat(join(pvDir, 'disk.img'))).isFile(), "the claim's data outlives the VMI");
    },
  );

  await t.test('a missing disk image shows as ErrImagePull on the VM, the VMI naming the volume; it waits, not fails', async (t) => {
    const vm = smokeVm('noimage');
    vm.spec.template.spec.volumes![0] = { name: 'containerdisk', containerDisk: { image: '/var/lib/vkvm-e2e-missing/disk.qcow2' } };
    await kv.createVm(vm);
    await waitFor(ns.vm('noimage'), (v) => ['ErrImagePull', 'ImagePullBackOff'].includes(v.status?.printableStatus ?? ''), {
      what: 'ErrImagePull or ImagePullBackOff',
      deadlineMs: 90_000,
    });
    // The VM's status is derived from its VMI's: the VMI has it by now.
    const vmi = await kv.readVmi('noimage');
    t.match(
      { phase: vmi?.status?.phase, synchronized: vmi?.status?.conditions?.find((c) => c.type === 'Synchronized') },
      {
        phase: 'Scheduled',
        synchronized: {
          status: 'False',
          reason: /^(ErrImagePull|ImagePullBackOff)$/,
          message: /spec\.volumes\[0\]\.containerDisk\.image: \/var\/lib\/vkvm-e2e-missing\/disk\.qcow2 does not exist on this node/,
        },
      },
      'the VMI stays Scheduled with Synchronized False naming the volume’s image',
    );
    t.same(qemuPidsOfDomain(`${NS}_noimage,`), [], 'no QEMU runs for it');
    await kv.deleteVm('noimage');
    await waitForGone(ns.vmi('noimage'), { deadlineMs: 90_000 });
    await waitForGone(ns.pods(LAUNCHER_PODS), { deadlineMs: 90_000 });
  });

  await t.test('a VMI the node finds invalid fails with Synchronized False and a SyncFailed event naming the field', async (t) => {
    const spec = smokeVmiSpec();
    spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
    spec.volumes!.push({ name: 'data', hostDisk: { path: 'relative/data.img', type: 'DiskOrCreate', capacity: '16Mi' } });
    const created = await kv.createVmi(vmiOf('badpath', spec));
    const failed = await waitFor(ns.vmi('badpath'), (v) => v.status?.phase === 'Failed', { what: 'Failed', deadlineMs: 90_000 });
    const field = /spec\.volumes\[3\]\.hostDisk\.path: must be an absolute path/;
    t.match(
      { reason: failed.status?.reason, synchronized: failed.status?.conditions?.find((c) => c.type === 'Synchronized') },
      { reason: 'InvalidVMSpec', synchronized: { status: 'False', reason: 'InvalidVMSpec', message: field } },
      'phase Failed, reason InvalidVMSpec, Synchronized False naming the field',
    );
    const event = await waitFor(ns.eventsOf(created.metadata.uid!), (e) => e.reason === 'SyncFailed', { what: 'the SyncFailed event' });
    t.match(event, { type: 'Warning', message: field }, 'a Warning event on the VMI names the field');
    t.equal(testQemuPids().length, 0, 'no QEMU was started for it');
    await kv.deleteVmi('badpath');
  });

  await t.test('a volume kind the node cannot provide fails the VMI naming its field; no disk is dropped', async (t) => {
    const spec = smokeVmiSpec();
    spec.domain.devices!.disks!.push({ name: 'root', disk: { bus: 'virtio' } });
    spec.volumes!.push({ name: 'root', ephemeral: { persistentVolumeClaim: { claimName: 'golden' } } } as never);
    await kv.createVmi(vmiOf('nostorage', spec));
    const failed = await waitFor(ns.vmi('nostorage'), (v) => v.status?.phase === 'Failed', { what: 'Failed', deadlineMs: 90_000 });
    t.match(
      { reason: failed.status?.reason, synchronized: failed.status?.conditions?.find((c) => c.type === 'Synchronized') },
      {
        reason: 'InvalidVMSpec',
        synchronized: { status: 'False', reason: 'InvalidVMSpec', message: /spec\.volumes\[3\]\.ephemeral: vkvm has no ephemeral/ },
      },
      'phase Failed, reason InvalidVMSpec, Synchronized False naming the ephemeral volume',
    );
    t.equal(testQemuPids().length, 0, 'no QEMU was started for it');
    await kv.deleteVmi('nostorage');
    await waitForGone(ns.vmi('nostorage'), { deadlineMs: 90_000 });
  });

  await t.test(
    "a claim on a CSI PV: the driver registers on the node's CSINode, the VM boots from disk.img in the published volume, and nothing stays staged",
    (t) => csiClaimCase(t, { cluster, ns, agent }),
  );

  await t.test(
    'a claim on a CSI PV of a driver not registered on the node: the VMI waits, Synchronized False naming the driver',
    async (t) => {
      const pvName = `vkvm-e2e-nodriver-${randomBytes(3).toString('hex')}`;
      await createCsiClaim(t, cluster, ns, { pvName, claim: 'nodriver-data', driver: 'csi.vkvm-e2e.example', volumeHandle: pvName });
      const spec = smokeVmiSpec();
      spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
      spec.volumes!.push({ name: 'data', persistentVolumeClaim: { claimName: 'nodriver-data' } });
      await kv.createVmi(vmiOf('nodriver', spec));
      const waiting = await waitFor(
        ns.vmi('nodriver'),
        (v) => v.status?.conditions?.some((c) => c.type === 'Synchronized' && c.status === 'False') === true,
        { what: 'Synchronized False', deadlineMs: 90_000 },
      );
      t.match(
        { phase: waiting.status?.phase, synchronized: waiting.status?.conditions?.find((c) => c.type === 'Synchronized') },
        { phase: 'Scheduled', synchronized: { status: 'False', message: /CSI driver csi\.vkvm-e2e\.example .*is not registered on node/ } },
        'the VMI stays Scheduled (it waits, not fails) with Synchronized False naming the driver',
      );
      t.same(qemuPidsOfDomain(`${NS}_nodriver,`), [], 'no QEMU runs for it');
      await kv.deleteVmi('nodriver');
      await waitForGone(ns.vmi('nodriver'), { deadlineMs: 90_000 });
    },
  );
});

/** A PV of a CSI driver's volume on the node, and a claim in the namespace bound to it; both go with the test. */
async function createCsiClaim(
  t: Test,
  cluster: TestCluster,
  ns: TestNamespace,
  o: { pvName: string; claim: string; driver: string; volumeHandle: string },
): Promise<void> {
  await cluster.clients.core.createPersistentVolume({
    body: {
      metadata: { name: o.pvName },
      spec: {
        capacity: { storage: '48Mi' },
        accessModes: ['ReadWriteOnce'],
        storageClassName: 'vkvm-e2e-csi',
        csi: { driver: o.driver, volumeHandle: o.volumeHandle, fsType: 'ext4' },
        persistentVolumeReclaimPolicy: 'Retain',
        nodeAffinity: {
          required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: [NODE] }] }] },
        },
      },
    },
  });
  t.teardown(() => cluster.clients.core.deletePersistentVolume({ name: o.pvName }).catch(() => undefined));
  await cluster.clients.core.createNamespacedPersistentVolumeClaim({
    namespace: NS,
    body: {
      metadata: { name: o.claim },
      spec: {
        accessModes: ['ReadWriteOnce'],
        storageClassName: 'vkvm-e2e-csi',
        volumeName: o.pvName,
        resources: { requests: { storage: '48Mi' } },
      },
    },
  });
  t.teardown(() => cluster.clients.core.deleteNamespacedPersistentVolumeClaim({ name: o.claim, namespace: NS }).catch(() => undefined));
  await waitFor(ns.pvc(o.claim), (c) => c.status?.phase === 'Bound', { what: 'Bound' });
}

/**
 * vkvm's own CSI driver as the operator runs it beside the agent, registered
 * through the agent's plugin registry dir; a volume made as a provisioner
 * would; two VMIs in turn on its claim, the second reading what the first
 * wrote; and after each, nothing of the volume left mounted on the node.
 */
async function csiClaimCase(t: Test, o: { cluster: TestCluster; ns: TestNamespace; agent: AgentProcess }): Promise<void> {
  const { cluster, ns, agent } = o;
  const kv = kubevirtIn(ns);
  const storage = cluster.clients.storage;
  const csiDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-csi-'));
  t.teardown(() => removeScratch(csiDir));
  const driver = await startDriverProcess({
    dir: join(csiDir, 'volumes'),
    socket: join(csiDir, 'csi.sock'),
    nodeId: NODE,
    extraArgs: [`--registration-socket=${registrationSocketIn(pluginRegistryDirOf(agent.stateDir), 'csi.vkvm.io')}`],
  });
  t.teardown(() => driver.stop());
  const csi = csiClient(driver.socket);
  t.teardown(() => csi.close());
  // As an operator would declare it: a volume on this host needs no attach.
  await storage.createCSIDriver({ body: { metadata: { name: 'csi.vkvm.io' }, spec: { attachRequired: false } } });
  t.teardown(() => storage.deleteCSIDriver({ name: 'csi.vkvm.io' }).catch(() => undefined));

  const csiNode = await poll(
    'the CSINode listing csi.vkvm.io',
    () => storage.readCSINode({ name: NODE }),
    (c) => c.spec.drivers.some((d) => d.name === 'csi.vkvm.io'),
    { deadlineMs: 30_000 },
  );
  t.same(
    csiNode.spec.drivers.map((d) => ({ name: d.name, nodeID: d.nodeID, topologyKeys: d.topologyKeys })),
    [{ name: 'csi.vkvm.io', nodeID: NODE, topologyKeys: ['topology.vkvm.io/node'] }],
    "the node's CSINode names the driver, its node ID and topology key",
  );
  t.equal(
    (await cluster.clients.core.readNode({ name: NODE })).metadata?.labels?.['topology.vkvm.io/node'],
    NODE,
    "the Node carries the driver's topology label",
  );

  const created = await csi.call('Controller', 'CreateVolume', {
    name: `e2e-${randomBytes(3).toString('hex')}`,
    capacityRange: { requiredBytes: 48 * 2 ** 20 },
    volumeCapabilities: [{ mount: { fsType: 'ext4' }, accessMode: { mode: 'SINGLE_NODE_WRITER' } }],
  });
  const volumeHandle = (created.volume as { volumeId: string }).volumeId;
  t.teardown(() => csi.call('Controller', 'DeleteVolume', { volumeId: volumeHandle }).catch(() => undefined));
  const pvName = `vkvm-e2e-csi-${randomBytes(3).toString('hex')}`;
  await createCsiClaim(t, cluster, ns, { pvName, claim: 'csi-data', driver: 'csi.vkvm.io', volumeHandle });

  const leftovers = async () => ({
    mounts: [...(await mountsUnder(join(agent.stateDir, 'pods'))), ...(await mountsUnder(join(agent.stateDir, 'plugins')))],
    podVolumeDirs: await readdir(join(agent.stateDir, 'pods')).catch(() => []),
    loops: await loopDevicesUnder(join(csiDir, 'volumes')),
  });
  /** Runs the VMI on the claim, runs `script` in its guest, deletes it; what the script printed. */
  const runOnClaim = async (name: string, script: string): Promise<string> => {
    const spec = smokeVmiSpec();
    spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
    spec.volumes!.push({ name: 'data', persistentVolumeClaim: { claimName: 'csi-data' } });
    const vmi = await kv.createVmi(vmiOf(name, spec));
    await waitFor(ns.vmi(name), (v) => v.status?.phase === 'Running', { what: 'Running', deadlineMs: BOOT_DEADLINE_MS });
    const [pod] = (
      await cluster.clients.core.listNamespacedPod({ namespace: NS, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` })
    ).items;
    const published = join(agent.stateDir, 'pods', pod!.metadata!.uid!, 'volumes', 'kubernetes.io~csi', pvName, 'mount');
    t.ok((await mountsUnder(agent.stateDir)).includes(published), `${name}: the volume is published for its pod`);
    t.equal((await stat(join(published, 'disk.img'))).size, 48 * 2 ** 20, `${name}: disk.img at the claim's capacity`);
    // The 48Mi disk (98304 sectors), whichever vd it is: the emptyDisk is 64Mi.
    const guestScript = `d=; for b in /sys/block/vd*; do [ "$(cat $b/size)" = 98304 ] && d=/dev/\${b##*/}; done; [ -n "$d" ]; ${script}`;
    const out = await poll(
      `${name}: the guest agent runs the script`,
      () => ns.kubectl(['exec', pod!.metadata!.name!, '--', '/bin/sh', '-c', guestScript]),
      (r) => r.code === 0,
      { deadlineMs: BOOT_DEADLINE_MS },
    );
    await kv.deleteVmi(name);
    await waitForGone(ns.vmi(name), { deadlineMs: 90_000 });
    await waitForGone(ns.pods({ labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` }), { deadlineMs: 90_000 });
    return out.stdout.trim();
  };

  /** Nothing of the volume left on the node once the VMI is gone (the agent takes it down; the sweep would retry). */
  const nothingLeft = async (vmi: string, message: string) =>
    t.same(
      await poll(`nothing of ${vmi} left on the node`, leftovers, (l) => l.mounts.length + l.podVolumeDirs.length + l.loops.length === 0, {
        deadlineMs: 60_000,
      }).catch(leftovers),
      { mounts: [], podVolumeDirs: [], loops: [] },
      message,
    );

  const marker = `csi-marker-${randomBytes(4).toString('hex')}`;
  await runOnClaim('csi-a', `printf ${marker} > $d; sync`);
  await nothingLeft('csi-a', 'the VMI gone: unpublished and unstaged, no mount, pod directory or loop device left');
  t.equal(await runOnClaim('csi-b', `head -c ${marker.length} $d`), marker, 'a second VMI on the claim reads what the first wrote');
  await nothingLeft('csi-b', 'after the second VMI too, nothing staged or published');
}

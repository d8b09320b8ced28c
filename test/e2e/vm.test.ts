// On the real control plane with a node agent: KubeVirt's
// documentation smoke VM (its demo image served by the test guest) runs as a
// VM → VMI → launcher pod → QEMU; run strategies stop and start it; deleting
// the VM lets the real garbage collector remove VMI and pod, and the VM stops.
// On the way: the guest agent's report on the VMI, and pause/unpause by the
// documented annotation, across an agent restart.
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { memoryLimitMiB } from '../../launcher/limits.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import { mergePatch } from '../../provider/kube/client.js';
import { isNotFound } from '../../provider/kube/errors.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { condition, qemuPids, startAgent, startTestCluster, testLog, waitFor } from './harness.js';
import { smokeVmiSpec } from './kubevirt-fixtures.js';

const NODE = 'vkvm-e2e-vm';
const NS = 'e2e-vm';
// As the node operator: images under the missing-image directory, and hostDisks in the temp dir the storage case makes.
const AGENT_ARGS = ['--host-image-dir=/var/lib/vkvm-e2e-missing', `--host-disk-dir=${tmpdir()}`];
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };
const BOOT_TIMEOUT_MS = 180_000;

/** KubeVirt's quickstart testvm (see smokeVmiSpec), runStrategy Always. */
const smokeVm = (name = 'testvm'): VirtualMachine => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachine',
  metadata: { name, namespace: NS },
  spec: {
    runStrategy: 'Always',
    template: {
      metadata: { labels: { 'kubevirt.io/size': 'small', 'kubevirt.io/domain': name } },
      spec: smokeVmiSpec(),
    },
  },
});

/** This test's QEMU processes: its domains are named <namespace>_<vmi>. */
const testQemuPids = (): number[] => qemuPids((argv) => argv.some((a) => a.includes(`guest=${NS}_`)));

t.test('the KubeVirt smoke VM runs on the node', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  let agent = await startAgent(t, cluster, { nodeName: NODE, extraArgs: AGENT_ARGS });
  const root = t;
  await cluster.clients.core.createNamespace({ body: { metadata: { name: NS } } });
  await waitFor(
    'the default ServiceAccount',
    () => cluster.clients.core.readNamespacedServiceAccount({ name: 'default', namespace: NS }),
    () => true,
  );
  const custom = cluster.clients.custom;
  const readVm = async (name = 'testvm') =>
    (await custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name })) as VirtualMachine;
  const readVmi = async (name = 'testvm'): Promise<VirtualMachineInstance | undefined> => {
    try {
      return (await custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', name })) as VirtualMachineInstance;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
  const launcherPods = async (): Promise<V1Pod[]> =>
    (await cluster.clients.core.listNamespacedPod({ namespace: NS, labelSelector: 'kubevirt.io=virt-launcher' })).items;
  const setRunStrategy = (runStrategy: string) =>
    custom.patchNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name: 'testvm', body: { spec: { runStrategy } } }, mergePatch);
  const running = () =>
    waitFor(
      'VM Running and ready, VMI Running',
      async () => ({ vm: await readVm(), vmi: await readVmi() }),
      (s) => s.vm.status?.printableStatus === 'Running' && s.vm.status.ready === true && s.vmi?.status?.phase === 'Running',
      {
        timeoutMs: BOOT_TIMEOUT_MS,
      },
    );

  await t.test('runStrategy Always: VM Running, VMI Running on the node, launcher pod owned by the VMI', async (t) => {
    await custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: smokeVm() });
    const { vm, vmi } = await running();
    t.match(
      { ready: vm.status?.ready, nodeName: vmi?.status?.nodeName },
      { ready: true, nodeName: NODE },
      'VM ready, VMI on the vkvm node',
    );
    const [pod] = await launcherPods();
    t.match(
      pod?.metadata?.ownerReferences,
      [{ kind: 'VirtualMachineInstance', name: 'testvm', uid: vmi?.metadata.uid, controller: true }],
      'the launcher pod is owned by the VMI',
    );
    // The request covers what the launcher's cgroup allows on this node: more under TCG (as on this workplace's machines).
    const accelerator = (await cluster.clients.core.readNode({ name: NODE })).metadata?.labels?.['vkvm.io/virtualization'] as 'kvm' | 'tcg';
    t.equal(
      pod?.spec?.containers[0]?.resources?.requests?.memory,
      `${memoryLimitMiB({ memoryMiB: 128, cpu: { sockets: 1, cores: 1, threads: 1 } }, accelerator)}Mi`,
      `the launcher pod requests the memory its cgroup gets under ${accelerator}`,
    );
    t.equal(testQemuPids().length, 1, 'one QEMU runs');
    const table = await cluster.kubectl(['get', 'vm,vmi', '-n', NS]);
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
      (await readVmi())?.status?.interfaces,
      [{ name: 'default', ipAddress: ip, ipAddresses: [ip], mac: vmi?.spec.domain.devices?.interfaces?.[0]?.macAddress ?? /^52:54:00:/ }],
      'VMI interfaces: the pod IP and the MAC of the pod network interface',
    );
  });

  await t.test('the guest agent connects: VMI AgentConnected and guestOSInfo', async (t) => {
    const vmi = await waitFor(
      'VMI AgentConnected with guestOSInfo',
      readVmi,
      (v) => condition(v ?? {}, 'AgentConnected') === 'True' && Boolean(v?.status?.guestOSInfo),
      {
        timeoutMs: 60_000,
      },
    );
    // The test guest has no /etc/os-release: qemu-ga reports uname's fields.
    t.match(
      vmi?.status?.guestOSInfo,
      { kernelRelease: /^\d+\.\d+\S*$/, kernelVersion: /^#/, machine: 'x86_64' },
      "guestOSInfo holds the guest agent's answer",
    );
  });

  await t.test('the vkvm.io/paused annotation pauses the VM; removed while the agent is down, the next agent unpauses it', async (t) => {
    const annotate = (value: string | null) =>
      custom.patchNamespacedCustomObject(
        { ...KV, plural: 'virtualmachineinstances', name: 'testvm', body: { metadata: { annotations: { 'vkvm.io/paused': value } } } },
        mergePatch,
      );
    const both = async () => ({ vm: await readVm(), vmi: await readVmi() });
    await annotate('true');
    const paused = await waitFor('VM Paused', both, (s) => s.vm.status?.printableStatus === 'Paused', { timeoutMs: 60_000 });
    t.match(
      {
        phase: paused.vmi?.status?.phase,
        paused: paused.vmi?.status?.conditions?.find((c) => c.type === 'Paused'),
        vm: paused.vm.status?.conditions?.find((c) => c.type === 'Paused'),
      },
      { phase: 'Running', paused: { status: 'True', reason: 'PausedByUser' }, vm: { status: 'True', reason: 'PausedByUser' } },
      'VMI Running with Paused True (PausedByUser), VM printableStatus Paused',
    );
    t.match(
      (await cluster.kubectl(['get', 'vmi', 'testvm', '-n', NS, '-o', 'wide'])).stdout,
      /^testvm\s.*\sTrue\s*$/m,
      'kubectl get vmi -o wide: PAUSED (the last column) True',
    );

    await agent.kill('SIGKILL');
    await annotate(null);
    agent = await startAgent(root, cluster, {
      nodeName: NODE,
      kubeletPort: agent.kubeletPort,
      stateDir: agent.stateDir,
      bridge: agent.bridge,
      extraArgs: AGENT_ARGS,
    });
    const resumed = await waitFor(
      'VM Running again',
      both,
      (s) => s.vm.status?.printableStatus === 'Running' && s.vm.status.ready === true && condition(s.vmi ?? {}, 'Paused') === undefined,
      {
        timeoutMs: 60_000,
      },
    );
    t.match(
      resumed,
      { vm: { status: { printableStatus: 'Running', ready: true } }, vmi: { status: { phase: 'Running' } } },
      'the restarted agent unpaused it: VM Running, no Paused condition',
    );
    const events = (
      await cluster.clients.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${resumed.vmi?.metadata.uid}` })
    ).items;
    t.match(
      ['Paused', 'Unpaused'].map((reason) => events.find((e) => e.reason === reason)),
      [{ message: 'VirtualMachineInstance paused' }, { message: 'VirtualMachineInstance unpaused' }],
      'Paused and Unpaused events on the VMI',
    );
  });

  await t.test('runStrategy Halted stops it: VMI and QEMU gone, VM Stopped; Always again runs it', async (t) => {
    await setRunStrategy('Halted');
    const stopped = await waitFor(
      'VM Stopped',
      async () => ({ vm: await readVm(), vmi: await readVmi(), pods: (await launcherPods()).length, qemu: testQemuPids().length }),
      (s) => s.vm.status?.printableStatus === 'Stopped' && !s.vmi && s.pods === 0 && s.qemu === 0,
      { timeoutMs: 90_000 },
    );
    t.match(stopped, { vm: { status: { printableStatus: 'Stopped' } }, vmi: undefined, pods: 0, qemu: 0 });
    await setRunStrategy('Always');
    await running();
    t.equal(testQemuPids().length, 1, 'running again');
  });

  await t.test('deleting the VM garbage-collects VMI and pod; launcher and QEMU are gone', async (t) => {
    await custom.deleteNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name: 'testvm' });
    const gone = await waitFor(
      'everything gone',
      async () => ({ vmi: await readVmi(), pods: (await launcherPods()).length, qemu: testQemuPids().length }),
      (s) => !s.vmi && s.pods === 0 && s.qemu === 0,
      { timeoutMs: 90_000 },
    );
    t.same(gone, { vmi: undefined, pods: 0, qemu: 0 });
    // This agent's launchers: other agents on the machine (other test files, other checkouts) have their own state dirs.
    const launchers = readdirSync('/proc').filter((p) => {
      try {
        const cmdline = readFileSync(`/proc/${p}/cmdline`, 'utf8');
        return cmdline.includes('launcher/main.js') && cmdline.includes(agent.stateDir);
      } catch {
        return false;
      }
    });
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
      await waitFor(
        'the claim bound',
        () => cluster.clients.core.readNamespacedPersistentVolumeClaim({ name: 'data', namespace: NS }),
        (c) => c.status?.phase === 'Bound',
        { timeoutMs: 60_000 },
      );
      const spec = smokeVmiSpec();
      spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } }, { name: 'scratch', disk: { bus: 'sata' } });
      spec.volumes!.push(
        { name: 'data', persistentVolumeClaim: { claimName: 'data' } },
        { name: 'scratch', hostDisk: { path: join(dir, 'scratch.img'), type: 'DiskOrCreate', capacity: '32Mi' } },
      );
      await custom.createNamespacedCustomObject({
        ...KV,
        plural: 'virtualmachineinstances',
        body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'storage', namespace: NS }, spec },
      });
      const vmi = await waitFor(
        'VMI storage Running and Ready',
        () => readVmi('storage'),
        (v) => v?.status?.phase === 'Running' && condition(v, 'Ready') === 'True',
        { timeoutMs: BOOT_TIMEOUT_MS },
      );
      t.equal(vmi?.status?.nodeName, NODE, 'running on the node');
      const sizes = { pv: (await stat(join(pvDir, 'disk.img'))).size, hostDisk: (await stat(join(dir, 'scratch.img'))).size };
      t.same(
        sizes,
        { pv: 64 * 2 ** 20, hostDisk: 32 * 2 ** 20 },
        "the claim's disk.img at the claim's capacity, the hostDisk at its capacity",
      );
      const qemu = qemuPids((argv) => argv.some((a) => a.includes(`guest=${NS}_storage`)));
      const argv = qemu.length ? readFileSync(`/proc/${qemu[0]}/cmdline`, 'utf8') : '';
      t.match(
        { pv: argv.includes(join(pvDir, 'disk.img')), hostDisk: argv.includes(join(dir, 'scratch.img')) },
        { pv: true, hostDisk: true },
        'QEMU has both files open as disks',
      );
      await custom.deleteNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', name: 'storage' });
      await waitFor(
        'the storage VMI gone with its QEMU',
        async () => ({ vmi: await readVmi('storage'), qemu: qemuPids((a) => a.some((x) => x.includes(`guest=${NS}_storage`))).length }),
        (s) => !s.vmi && s.qemu === 0,
        { timeoutMs: 90_000 },
      );
      t.ok((await stat(join(pvDir, 'disk.img'))).isFile(), "the claim's data outlives the VMI");
    },
  );

  await t.test('a missing disk image shows as ErrImagePull on the VM, the VMI naming the volume; it waits, not fails', async (t) => {
    const vm = smokeVm('noimage');
    vm.spec.template.spec.volumes![0] = { name: 'containerdisk', containerDisk: { image: '/var/lib/vkvm-e2e-missing/disk.qcow2' } };
    await custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: vm });
    const pulling = await waitFor(
      'VM ErrImagePull or ImagePullBackOff',
      async () => ({ vm: await readVm('noimage'), vmi: await readVmi('noimage') }),
      (s) => ['ErrImagePull', 'ImagePullBackOff'].includes(s.vm.status?.printableStatus ?? ''),
      { timeoutMs: 90_000 },
    );
    t.match(
      { phase: pulling.vmi?.status?.phase, synchronized: pulling.vmi?.status?.conditions?.find((c) => c.type === 'Synchronized') },
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
    await custom.deleteNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name: 'noimage' });
    await waitFor(
      'the noimage VMI and pod gone',
      async () => ({ vmi: await readVmi('noimage'), pods: (await launcherPods()).length }),
      (s) => !s.vmi && s.pods === 0,
      { timeoutMs: 90_000 },
    );
  });

  await t.test('a VMI the node finds invalid fails with Synchronized False and a SyncFailed event naming the field', async (t) => {
    const spec = smokeVmiSpec();
    spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
    spec.volumes!.push({ name: 'data', hostDisk: { path: 'relative/data.img', type: 'DiskOrCreate', capacity: '16Mi' } });
    const created = (await custom.createNamespacedCustomObject({
      ...KV,
      plural: 'virtualmachineinstances',
      body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'badpath', namespace: NS }, spec },
    })) as VirtualMachineInstance;
    const failed = await waitFor(
      'VMI badpath Failed',
      () => readVmi('badpath'),
      (v) => v?.status?.phase === 'Failed',
      { timeoutMs: 90_000 },
    );
    const field = /spec\.volumes\[3\]\.hostDisk\.path: must be an absolute path/;
    t.match(
      { reason: failed?.status?.reason, synchronized: failed?.status?.conditions?.find((c) => c.type === 'Synchronized') },
      { reason: 'InvalidVMSpec', synchronized: { status: 'False', reason: 'InvalidVMSpec', message: field } },
      'phase Failed, reason InvalidVMSpec, Synchronized False naming the field',
    );
    const events = await waitFor(
      'the SyncFailed event on the VMI',
      async () =>
        (await cluster.clients.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${created.metadata.uid}` }))
          .items,
      (es) => es.some((e) => e.reason === 'SyncFailed'),
    );
    t.match(
      events.find((e) => e.reason === 'SyncFailed'),
      { type: 'Warning', message: field },
      'a Warning event on the VMI names the field',
    );
    t.equal(testQemuPids().length, 0, 'no QEMU was started for it');
    await custom.deleteNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', name: 'badpath' });
  });
});

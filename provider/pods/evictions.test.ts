import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { VM_SPEC_VERSION, type DiskSpec, type VmSpec } from '../../vmm/spec.js';
import type { PressureCondition } from '../node/status.js';
import { podControllerEnv, vmPod, type PodControllerEnv } from '../../test/helpers/pod-controller.js';
import { admissionRefusal } from './admission.js';
import { disksOverLimit, ephemeralStorageLimit } from './ephemeral-storage.js';
import { dirUsageBytes } from './storage-eviction.js';

const MiB = 2 ** 20;

function summary(env: PodControllerEnv, name: string) {
  const pod = env.pods.get(`ns/${name}`);
  const c = pod?.status?.containerStatuses?.[0];
  return {
    phase: pod?.status?.phase,
    reason: pod?.status?.reason,
    message: pod?.status?.message,
    podIP: pod?.status?.podIP,
    state: c?.state?.terminated ? { terminated: c.state.terminated.reason } : Object.keys(c?.state ?? {})[0],
    starts: env.launchers.starts.get(`uid-${name}`),
  };
}

function withEphemeralLimit(pod: V1Pod, limit: string): V1Pod {
  pod.spec!.containers[0]!.resources!.limits!['ephemeral-storage'] = limit;
  return pod;
}

t.test(
  "under DiskPressure a new pod is refused as the kubelet refuses it (Failed, Evicted) with nothing made for it; an admitted pod's VM still restarts",
  async (t) => {
    let pressure: PressureCondition[] = [];
    const env = await podControllerEnv(t, undefined, undefined, undefined, { nodePressure: () => pressure });
    env.pods.put(vmPod('admitted'));
    await env.settle();
    pressure = ['DiskPressure'];
    env.pods.put(vmPod('new'));
    env.launchers.crash('uid-admitted');
    await env.settle();
    await env.advance(10_000);
    const underPressure = { new: summary(env, 'new'), admitted: summary(env, 'admitted') };
    pressure = [];
    env.pods.put(vmPod('later'));
    await env.advance(60_000);
    t.same(
      { underPressure, afterwards: { new: summary(env, 'new'), later: summary(env, 'later').phase } },
      {
        underPressure: {
          new: {
            phase: 'Failed',
            reason: 'Evicted',
            message: 'Pod was rejected: The node had condition: [DiskPressure]. ',
            podIP: undefined,
            state: { terminated: 'Evicted' },
            starts: undefined,
          },
          admitted: {
            phase: 'Running',
            reason: undefined,
            message: undefined,
            podIP: '10.244.0.5',
            state: 'running',
            starts: 2,
          },
        },
        afterwards: { new: { ...summary(env, 'new'), phase: 'Failed', starts: undefined }, later: 'Running' },
      },
      'the refused pod never gets an address or a VM, and stays Failed once the pressure is over',
    );
    t.match(
      env.events.filter((e) => e.reason === 'Evicted'),
      [{ object: 'Pod/new', type: 'Warning', message: /The node had condition: \[DiskPressure\]/ }],
      'an Evicted event on the refused pod only',
    );
  },
);

t.test(
  "a VM whose disk use outgrows its pod's ephemeral-storage limit is evicted as the kubelet evicts: Failed, Evicted, the usage named; stopped, never restarted",
  async (t) => {
    const usage = new Map<string, number>([
      ['/vms/uid-grows', 10 * MiB],
      ['/vms/uid-unlimited', 900 * MiB],
    ]);
    const env = await podControllerEnv(t, undefined, undefined, undefined, { usageBytes: async (dir) => usage.get(dir) ?? 0 });
    env.pods.put(withEphemeralLimit(vmPod('grows'), '64Mi'));
    env.pods.put(vmPod('unlimited'));
    await env.settle();
    await env.advance(10_000);
    const within = summary(env, 'grows').phase;
    usage.set('/vms/uid-grows', 70 * MiB);
    await env.advance(10_000);
    const evicted = { ...summary(env, 'grows'), launcherLive: env.launchers.get('uid-grows')?.live };
    await env.advance(600_000);
    t.same(
      { within, evicted, later: { starts: summary(env, 'grows').starts, unlimited: summary(env, 'unlimited').phase } },
      {
        within: 'Running',
        evicted: {
          phase: 'Failed',
          reason: 'Evicted',
          message: "Pod ephemeral local storage usage exceeds the total limit of containers 64Mi. The VM's disks and logs use 70Mi.",
          podIP: '10.244.0.5',
          state: { terminated: 'Evicted' },
          starts: 1,
          launcherLive: false,
        },
        later: { starts: 1, unlimited: 'Running' },
      },
    );
  },
);

const disk = (name: string, source: DiskSpec['source']): DiskSpec => ({ name, device: 'disk', bus: 'virtio', source });
const spec = (disks: DiskSpec[]): VmSpec => ({
  version: VM_SPEC_VERSION,
  uid: 'u',
  name: 'ns_vm',
  cpu: { sockets: 1, cores: 1, threads: 1 },
  memoryMiB: 128,
  firmware: { kind: 'bios' },
  disks,
  interfaces: [],
  guestAgent: true,
  acpi: true,
  labels: {},
});

t.test('empty disks and DiskOrCreate files count at full size against the limit; images and PersistentVolumes do not', async (t) => {
  const disks = spec([
    disk('root', { kind: 'image', path: '/images/disk.qcow2' }),
    disk('scratch', { kind: 'empty', sizeMiB: 64 }),
    disk('made', { kind: 'host', path: '/disks/a.img', createSizeMiB: 32 }),
    disk('claim', { kind: 'host', path: '/pv/disk.img', createSizeMiB: 1024, fromPersistentVolume: true }),
  ]);
  const field = 'spec.domain.resources.limits.ephemeral-storage';
  const at = (limit?: string) => disksOverLimit(limit ? withEphemeralLimit(vmPod('x'), limit) : vmPod('x'), disks, field)?.causes;
  t.same(
    { none: at(), exact: at('96Mi'), over: at('64Mi'), limit: ephemeralStorageLimit(withEphemeralLimit(vmPod('x'), '1Gi')) },
    {
      none: undefined,
      exact: undefined,
      over: [
        {
          path: field,
          reason: 'FieldValueInvalid',
          message: "the VM's disks take 96Mi of the node's ephemeral storage (scratch 64Mi, made 32Mi), more than the limit of 64Mi",
        },
      ],
      limit: { bytes: 1024 * MiB, quantity: '1Gi' },
    },
  );
});

t.test("admission follows the kubelet's eviction manager: disk and PID pressure refuse all, memory pressure BestEffort only", async (t) => {
  const bestEffort: V1Pod = { spec: { containers: [{ name: 'vm' }] } };
  const tolerant: V1Pod = {
    spec: { containers: [{ name: 'vm' }], tolerations: [{ key: 'node.kubernetes.io/memory-pressure', effect: 'NoSchedule' }] },
  };
  const critical: V1Pod = { spec: { containers: [{ name: 'vm' }], priority: 2_000_001_000 } };
  const sized = vmPod('sized');
  t.same(
    {
      calm: admissionRefusal(bestEffort, []),
      memoryBestEffort: admissionRefusal(bestEffort, ['MemoryPressure']),
      memorySized: admissionRefusal(sized, ['MemoryPressure']),
      memoryTolerant: admissionRefusal(tolerant, ['MemoryPressure']),
      diskAndPids: admissionRefusal(sized, ['DiskPressure', 'PIDPressure']),
      critical: admissionRefusal(critical, ['DiskPressure']),
    },
    {
      calm: undefined,
      memoryBestEffort: 'Pod was rejected: The node had condition: [MemoryPressure]. ',
      memorySized: undefined,
      memoryTolerant: undefined,
      diskAndPids: 'Pod was rejected: The node had condition: [DiskPressure PIDPressure]. ',
      critical: undefined,
    },
  );
});

t.test('dirUsageBytes counts the blocks files hold, not their apparent size', async (t) => {
  const { open, writeFile, mkdir } = await import('node:fs/promises');
  const dir = t.testdir();
  await mkdir(`${dir}/disks`);
  const sparse = await open(`${dir}/disks/empty.qcow2`, 'w');
  await sparse.truncate(512 * MiB);
  await sparse.close();
  await writeFile(`${dir}/disks/written.img`, Buffer.alloc(4 * MiB, 1));
  const used = await dirUsageBytes(dir);
  t.ok(used >= 4 * MiB && used < 5 * MiB, `4 MiB written and a 512 MiB sparse file take ${used} bytes`);
  t.equal(await dirUsageBytes(`${dir}/gone`), 0, 'a directory that is gone uses nothing');
});

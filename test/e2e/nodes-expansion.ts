// The multi-node suite's expansion subtest (multi-node/nodes.ts), on the VMI
// nodes-storage.ts's vmiOnDefaultClassClaim already runs on a claim of the
// default class (no VM of its own): the tenant asks for a larger claim;
// external-resizer (one, trivial: the drivers expand on the node) raises the
// PV and marks the claim; the node's agent grows the volume, disk.img and the
// running QEMU's disk, and reports on the claim as the kubelet does. The
// guest sees the new size; the tenant cannot touch the class's expansion.
import { StorageV1Api } from '@kubernetes/client-node';
import type { Test } from 'tap';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import type { CommandResult } from './framework/index.js';
import { apiOutcome, poll } from './framework/index.js';

const MiB = 2 ** 20;
const DEADLINE_MS = 60_000;

export async function claimExpandedUnderRunningVm(
  t: Test,
  o: {
    admin: KubeClients;
    tenant: KubeClients;
    namespace: string;
    claimName: string;
    fromMiB: number;
    toMiB: number;
    /** The VMI's launcher pod: `kubectl exec` reaches its guest agent. */
    podName: string;
    /** kubectl as the tenant, in the namespace. */
    kubectl: (args: string[]) => Promise<CommandResult>;
  },
): Promise<void> {
  const { admin, tenant, namespace, claimName } = o;
  const storageTenant = tenant.kc.makeApiClient(StorageV1Api);
  t.match(
    await apiOutcome(() => storageTenant.patchStorageClass({ name: 'vkvm-local', body: { allowVolumeExpansion: false } }, mergePatch)),
    { code: 403 },
    "the tenant cannot change the class's allowVolumeExpansion",
  );

  await tenant.core.patchNamespacedPersistentVolumeClaim(
    { name: claimName, namespace, body: { spec: { resources: { requests: { storage: `${o.toMiB}Mi` } } } } },
    mergePatch,
  );
  const resized = await poll(
    `${claimName}'s status capacity at ${o.toMiB}Mi`,
    () => admin.core.readNamespacedPersistentVolumeClaim({ name: claimName, namespace }),
    (c) => c.status?.capacity?.storage === `${o.toMiB}Mi`,
    { deadlineMs: DEADLINE_MS },
  );
  const pv = await admin.core.readPersistentVolume({ name: resized.spec!.volumeName! });
  t.match(
    {
      pv: pv.spec?.capacity?.storage,
      conditions: (resized.status?.conditions ?? []).map((c) => c.type),
      allocatedStatus: resized.status?.allocatedResourceStatuses?.storage,
    },
    { pv: `${o.toMiB}Mi`, conditions: [], allocatedStatus: undefined },
    'the PV is raised by the resizer; the node reports the claim done as the kubelet does (no FileSystemResizePending left)',
  );

  // The guest's virtio disks by size in 512-byte sectors; the guest agent may connect a moment after Running.
  const sizes = 'for b in /sys/block/vd*; do cat $b/size; done';
  const guest = await poll(
    `the guest sees a ${o.toMiB} MiB disk`,
    () => o.kubectl(['exec', o.podName, '--', '/bin/sh', '-c', sizes]),
    (r) => r.code === 0 && r.stdout.split('\n').includes(String((o.toMiB * MiB) / 512)),
    { deadlineMs: DEADLINE_MS, intervalMs: 1000 },
  );
  t.notOk(
    guest.stdout.split('\n').includes(String((o.fromMiB * MiB) / 512)),
    `no disk of the old ${o.fromMiB} MiB is left in the guest: the running VM's data disk grew`,
  );
}

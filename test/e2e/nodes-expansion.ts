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
import { apiOutcome, poll, type CommandResult } from './framework/index.js';

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

  // The guest's virtio disks by size in 512-byte sectors; the guest agent may connect a moment after Running.
  const diskSizes = async (what: string, until: (sectors: string[]) => boolean) =>
    (
      await poll(
        what,
        () => o.kubectl(['exec', o.podName, '--', '/bin/sh', '-c', 'for b in /sys/block/vd*; do cat $b/size; done']),
        (r) => r.code === 0 && until(r.stdout.trim().split('\n')),
        { deadlineMs: DEADLINE_MS, intervalMs: 1000 },
      )
    ).stdout
      .trim()
      .split('\n');
  const [from, to] = [String((o.fromMiB * MiB) / 512), String((o.toMiB * MiB) / 512)];
  const count = (sizes: string[], size: string) => sizes.filter((s) => s === size).length;
  const before = await diskSizes("the guest's disks", (sizes) => sizes.includes(from));

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

  const after = await diskSizes(`the guest sees a ${o.toMiB} MiB disk`, (sizes) => sizes.includes(to));
  t.same(
    { disks: after.length, [`${o.fromMiB}MiB`]: count(after, from), [`${o.toMiB}MiB`]: count(after, to) },
    { disks: before.length, [`${o.fromMiB}MiB`]: count(before, from) - 1, [`${o.toMiB}MiB`]: count(before, to) + 1 },
    `the running guest's data disk grew from ${o.fromMiB} to ${o.toMiB} MiB, no other disk changed`,
  );
}

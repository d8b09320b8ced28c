// A VM's disks as the kubelet counts a pod's local ephemeral storage: the disk
// the node gives a VM (empty disks and DiskOrCreate files at their full size,
// which the guest may fill) is charged against the pod's ephemeral-storage
// limit before the VM starts; a pod whose disks alone exceed it is refused,
// naming the field. What grows later (the root disk's overlay, as a
// container's writable layer, and console logs) is watched by
// storage-eviction.ts. Pure.
import type { V1Pod } from '@kubernetes/client-node';
import { parseQuantity } from '../kube/quantity.js';
import { SpecError } from '../../vmm/errors.js';
import type { VmSpec } from '../../vmm/spec.js';

const MIB = 2 ** 20;

export interface EphemeralStorageLimit {
  bytes: number;
  /** As written in the pod (the API server's canonical form), for messages. */
  quantity: string;
}

/** The pod's ephemeral-storage limit, as the kubelet's PodLimits sums its containers'; undefined when none has one. */
export function ephemeralStorageLimit(pod: V1Pod): EphemeralStorageLimit | undefined {
  const limits = (pod.spec?.containers ?? []).map((c) => c.resources?.limits?.['ephemeral-storage']).filter((q) => q !== undefined);
  if (!limits.length) return undefined;
  const bytes = limits.reduce((sum, q) => sum + (parseQuantity(q) ?? 0), 0);
  return { bytes, quantity: limits.length === 1 ? limits[0]! : `${Math.ceil(bytes / MIB)}Mi` };
}

/** The disks the node gives the VM at their full size: empty disks and files created for DiskOrCreate (not PersistentVolumes). */
export function chargedDisks(spec: VmSpec): Array<{ name: string; sizeMiB: number }> {
  return spec.disks.flatMap((d) => {
    const s = d.source;
    if (s.kind === 'empty') return [{ name: d.name, sizeMiB: s.sizeMiB }];
    if (s.kind === 'host' && s.createSizeMiB !== undefined && !s.fromPersistentVolume) return [{ name: d.name, sizeMiB: s.createSizeMiB }];
    return [];
  });
}

/**
 * A SpecError at `field` (the limit as the user wrote it: the pod's or the
 * VMI's) when the VM's charged disks exceed the pod's limit; else undefined.
 */
export function disksOverLimit(pod: V1Pod, spec: VmSpec, field: string): SpecError | undefined {
  const limit = ephemeralStorageLimit(pod);
  const disks = chargedDisks(spec);
  const totalMiB = disks.reduce((sum, d) => sum + d.sizeMiB, 0);
  if (!limit || totalMiB * MIB <= limit.bytes) return undefined;
  const listed = disks.map((d) => `${d.name} ${d.sizeMiB}Mi`).join(', ');
  return new SpecError([
    {
      path: field,
      reason: 'FieldValueInvalid',
      message: `the VM's disks take ${totalMiB}Mi of the node's ephemeral storage (${listed}), more than the limit of ${limit.quantity}`,
    },
  ]);
}

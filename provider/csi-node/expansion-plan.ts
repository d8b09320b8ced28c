// The kubelet's part of a volume's expansion, decided (pure). external-resizer
// (or the driver's controller) has raised the PV's capacity and marked the
// claim; the node then grows what the consumer sees and reports it on the
// claim as the kubelet's MarkFSResizeFinished does: status.capacity to the
// PV's, the FileSystemResizePending and Resizing conditions gone, and the
// storage entry of allocatedResourceStatuses gone. NodeRestriction lets a node
// write exactly those fields, for the claims of its pods.
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1PersistentVolumeClaimCondition } from '@kubernetes/client-node';
import { parseQuantity } from '../kube/quantity.js';

const RESIZE_CONDITIONS = new Set(['FileSystemResizePending', 'Resizing']);
/** allocatedResourceStatuses values that ask the node to act (RecoverVolumeExpansionFailure). */
const NODE_PENDING = new Set(['NodeResizePending', 'NodeResizeInProgress']);

export type ClaimExpansion =
  | { kind: 'none' }
  /** Grow the volume and the consumer's disk to `toBytes`, then write `status` (a JSON merge patch of the claim's status). */
  | { kind: 'expand'; toBytes: number; status: object };

const bytesOf = (q: string | undefined) => (q === undefined ? undefined : (parseQuantity(q) ?? undefined));

/**
 * Whether a claim may ask for expansion, read without its PV: it is marked, or requests more than its status
 * capacity (a resize raises the request first and the status last). A claim that does neither costs no PV read.
 */
export function claimMayExpand(pvc: V1PersistentVolumeClaim): boolean {
  if (pvc.status?.phase !== 'Bound') return false;
  const marked =
    (pvc.status.conditions ?? []).some((c) => c.type === 'FileSystemResizePending') ||
    NODE_PENDING.has(pvc.status.allocatedResourceStatuses?.storage ?? '');
  const requested = bytesOf(pvc.spec?.resources?.requests?.storage);
  const status = bytesOf(pvc.status.capacity?.storage);
  return marked || status === undefined || (requested !== undefined && requested > status);
}

/**
 * Whether the node must expand the claim's volume: the claim says so (FileSystemResizePending, or
 * allocatedResourceStatuses NodeResizePending), or the PV is larger than the claim's status capacity (the
 * kubelet's own test). Level-triggered: after the status patch, neither holds.
 */
export function claimExpansion(pv: V1PersistentVolume, pvc: V1PersistentVolumeClaim): ClaimExpansion {
  const pvQuantity = pv.spec?.capacity?.storage;
  const pvBytes = bytesOf(pvQuantity);
  if (pvQuantity === undefined || pvBytes === undefined || pvc.status?.phase !== 'Bound') return { kind: 'none' };
  const statusBytes = bytesOf(pvc.status.capacity?.storage);
  const conditions = pvc.status.conditions ?? [];
  const marked =
    conditions.some((c) => c.type === 'FileSystemResizePending') || NODE_PENDING.has(pvc.status.allocatedResourceStatuses?.storage ?? '');
  if (!marked && statusBytes !== undefined && pvBytes <= statusBytes) return { kind: 'none' };
  return { kind: 'expand', toBytes: pvBytes, status: resizedStatus(pvc, pvQuantity, conditions) };
}

function resizedStatus(pvc: V1PersistentVolumeClaim, capacity: string, conditions: V1PersistentVolumeClaimCondition[]): object {
  const { storage: _done, ...otherStatuses } = pvc.status?.allocatedResourceStatuses ?? {};
  return {
    // The resourceVersion makes the merge patch conditional: a claim that changed meanwhile is read again.
    metadata: { resourceVersion: pvc.metadata?.resourceVersion },
    status: {
      capacity: { ...pvc.status?.capacity, storage: capacity },
      conditions: conditions.filter((c) => !RESIZE_CONDITIONS.has(c.type)),
      allocatedResourceStatuses: Object.keys(otherStatuses).length ? { ...otherStatuses, storage: null } : null,
    },
  };
}

/** KubeVirt's disk.img in a Filesystem volume is as large as the claim: the size to grow it to, or none when it is. */
export function diskImageGrowth(currentBytes: number, claimBytes: number): number | undefined {
  const target = Math.floor(claimBytes / 2 ** 20) * 2 ** 20;
  return target > currentBytes ? target : undefined;
}

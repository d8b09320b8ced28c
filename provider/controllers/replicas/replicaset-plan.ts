// The VirtualMachineInstanceReplicaSet controller's pure half (KubeVirt's
// pkg/virt-controller/watch/replicaset): which of a namespace's VMIs are the
// set's, how many to create or which to delete, the finished ones to clean
// up, and the VMI the template makes.
import { controllerRefTo } from '../../kubevirt/controller-ref.js';
import { findCondition } from '../../kubevirt/conditions.js';
import type { VirtualMachineInstanceReplicaSet } from '../../kubevirt/replica-types.js';
import { KUBEVIRT_API_VERSION, type OwnerReference, type VirtualMachineInstance } from '../../kubevirt/types.js';
import { selectorMatches } from './selector.js';

/** KubeVirt's BurstReplicas: at most this many creates or deletes per sync. */
export const BURST_REPLICAS = 250;

const final = (vmi: VirtualMachineInstance) => vmi.status?.phase === 'Succeeded' || vmi.status?.phase === 'Failed';

/** The object's controller reference names this UID. */
export const controlledBy = (obj: { metadata: { ownerReferences?: OwnerReference[] } }, uid: string | undefined): boolean =>
  Boolean(uid && obj.metadata.ownerReferences?.some((r) => r.controller && r.uid === uid));

/** The set's VMIs: controlled by it and still matching its selector. */
export function vmisOf(rs: VirtualMachineInstanceReplicaSet, vmis: readonly VirtualMachineInstance[]): VirtualMachineInstance[] {
  const namespace = rs.metadata.namespace ?? 'default';
  return vmis.filter(
    (v) =>
      (v.metadata.namespace ?? 'default') === namespace &&
      controlledBy(v, rs.metadata.uid) &&
      selectorMatches(rs.spec.selector, v.metadata.labels),
  );
}

/** Counted as replicas: not final and not being deleted. */
export const isActive = (vmi: VirtualMachineInstance): boolean => !final(vmi) && !vmi.metadata.deletionTimestamp;
export const isReady = (vmi: VirtualMachineInstance): boolean => findCondition(vmi.status?.conditions, 'Ready')?.status === 'True';

/**
 * The order VMIs go in on scale-in. KubeVirt takes the first of its cache's
 * list (no order it promises; its TODO: "not yet running VMIs < migrating
 * VMIs < other"); vkvm takes that TODO's order, never-running before running,
 * then not Ready before Ready, newest first within each.
 */
export function scaleInOrder(vmis: readonly VirtualMachineInstance[]): VirtualMachineInstance[] {
  const rank = (v: VirtualMachineInstance) => (v.status?.phase === 'Running' ? 2 : 0) + (isReady(v) ? 1 : 0);
  const created = (v: VirtualMachineInstance) => v.metadata.creationTimestamp ?? '';
  return [...vmis].sort((a, b) => rank(a) - rank(b) || (created(a) < created(b) ? 1 : created(a) > created(b) ? -1 : 0));
}

export interface ReplicaSetPlan {
  /** VMIs to create now. */
  create: number;
  /** Active VMIs to delete (scale-in). */
  delete: VirtualMachineInstance[];
  /** Final VMIs to delete once scaling went well (their replacements were made). */
  cleanUp: VirtualMachineInstance[];
  active: VirtualMachineInstance[];
}

/** What a sync does; nothing while paused or being deleted. */
export function planReplicaSet(rs: VirtualMachineInstanceReplicaSet, owned: readonly VirtualMachineInstance[]): ReplicaSetPlan {
  const active = owned.filter(isActive);
  const idle = { create: 0, delete: [], cleanUp: [], active };
  if (rs.spec.paused || rs.metadata.deletionTimestamp) return idle;
  const diff = active.length - (rs.spec.replicas ?? 1);
  const cleanUp = owned.filter((v) => final(v) && !v.metadata.deletionTimestamp).slice(0, BURST_REPLICAS);
  if (diff < 0) return { ...idle, create: Math.min(-diff, BURST_REPLICAS), cleanUp };
  return { ...idle, delete: scaleInOrder(active).slice(0, Math.min(diff, BURST_REPLICAS)), cleanUp };
}

/**
 * The VMI the template makes: the template's metadata and spec, named from
 * the template's name or generateName or else the set's (KubeVirt's
 * getVirtualMachineBaseName), labelled with the template's labels and
 * controlled by the set.
 */
export function vmiForReplicaSet(rs: VirtualMachineInstanceReplicaSet): VirtualMachineInstance {
  const meta = rs.spec.template.metadata ?? {};
  const base = meta.name || meta.generateName || rs.metadata.name!;
  return {
    apiVersion: KUBEVIRT_API_VERSION,
    kind: 'VirtualMachineInstance',
    metadata: {
      generateName: base,
      namespace: rs.metadata.namespace ?? 'default',
      labels: { ...(meta.labels ?? {}) },
      ...(meta.annotations ? { annotations: { ...meta.annotations } } : {}),
      ownerReferences: [controllerRefTo(rs, KUBEVIRT_API_VERSION, 'VirtualMachineInstanceReplicaSet')],
    },
    spec: structuredClone(rs.spec.template.spec),
  };
}

// What the migration controller observes of the pods and nodes a migration
// involves, reduced to the facts the transition table reads (phases.ts).
// The node agents report on their own launcher pod's status, as conditions
// `vkvm.io/MigrationSource` and `vkvm.io/MigrationTarget` whose message
// starts with `<migrationUid>:` (docs/design/live-migration.md §2), so a
// condition left from an earlier migration of the same VMI is ignored. Pure.
import type { V1Node, V1Pod } from '@kubernetes/client-node';

export const SOURCE_CONDITION = 'vkvm.io/MigrationSource';
export const TARGET_CONDITION = 'vkvm.io/MigrationTarget';

export type SourceReport = 'Started' | 'Migrated' | 'Failed' | 'Aborted';
export type TargetReport = 'Ready' | 'Running' | 'Failed';

export interface Evidence<R extends string> {
  reason: R;
  /** The condition's lastTransitionTime (RFC 3339). */
  at: string;
  /** The message without the uid prefix. */
  message: string;
}

const SOURCE_REPORTS: readonly SourceReport[] = ['Started', 'Migrated', 'Failed', 'Aborted'];
const TARGET_REPORTS: readonly TargetReport[] = ['Ready', 'Running', 'Failed'];

function report<R extends string>(pod: V1Pod | undefined, type: string, uid: string, known: readonly R[]): Evidence<R> | undefined {
  const c = pod?.status?.conditions?.find((x) => x.type === type);
  const prefix = `${uid}:`;
  if (!c || c.status !== 'True' || !c.message?.startsWith(prefix) || !known.includes(c.reason as R)) return undefined;
  const at = c.lastTransitionTime ? new Date(c.lastTransitionTime).toISOString() : new Date(0).toISOString();
  return { reason: c.reason as R, at, message: c.message.slice(prefix.length).trim() };
}

/** The source agent's report on this migration, from its launcher pod. */
export const sourceReport = (pod: V1Pod | undefined, uid: string) => report(pod, SOURCE_CONDITION, uid, SOURCE_REPORTS);
/** The target agent's report on this migration, from the target pod. */
export const targetReport = (pod: V1Pod | undefined, uid: string) => report(pod, TARGET_CONDITION, uid, TARGET_REPORTS);

/** The target pod as the table reads it. */
export interface TargetPodView {
  name: string;
  /** Bound to this node. */
  node?: string;
  phase: string;
  createdAt: string;
  deleting: boolean;
  /** When the scheduler last found no node for it (PodScheduled False, Unschedulable). */
  unschedulableSince?: string;
  unschedulableMessage?: string;
}

export function targetPodView(pod: V1Pod): TargetPodView {
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  const unschedulable = scheduled?.status === 'False' && scheduled.reason === 'Unschedulable';
  const iso = (d: Date | string | undefined) => (d ? new Date(d).toISOString() : new Date(0).toISOString());
  return {
    name: pod.metadata?.name ?? '',
    ...(pod.spec?.nodeName ? { node: pod.spec.nodeName } : {}),
    phase: pod.status?.phase ?? 'Pending',
    createdAt: iso(pod.metadata?.creationTimestamp),
    deleting: Boolean(pod.metadata?.deletionTimestamp),
    ...(unschedulable ? { unschedulableSince: iso(scheduled.lastTransitionTime) } : {}),
    ...(unschedulable && scheduled.message ? { unschedulableMessage: scheduled.message } : {}),
  };
}

/** A node as the table reads it: Ready, and the address the source's relay dials. */
export interface NodeView {
  ready: boolean;
  address?: string;
}

export function nodeView(node: V1Node): NodeView {
  const ready = node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
  const address = node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address;
  return { ready, ...(address ? { address } : {}) };
}

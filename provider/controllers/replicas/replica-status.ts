// The status a VirtualMachineInstanceReplicaSet or VirtualMachinePool shows,
// as KubeVirt's controllers write it: how many of its objects count and how
// many are Ready, the selector's canonical string (what the scale subresource
// hands an HPA), ReplicaPaused while spec.paused, and ReplicaFailure while the
// last create or delete failed. Pure; the controllers are its one writer.
import { removeCondition, setCondition } from '../../kubevirt/conditions.js';
import type { LabelSelector, ReplicaStatus } from '../../kubevirt/replica-types.js';
import { selectorString } from './selector.js';

/** The wording differs between the two kinds; KubeVirt's own. */
export interface PausedWording {
  reason: string;
  message: string;
}

export const REPLICASET_PAUSED: PausedWording = { reason: 'Paused', message: 'Controller got paused' };
export const POOL_PAUSED: PausedWording = { reason: 'SuccessfulPaused', message: 'Pool controller is paused' };

/** A failed scale step: KubeVirt's reason (FailedCreate, FailedScaleOut, ...) and the error. */
export interface ReplicaFailure {
  reason: string;
  message: string;
}

export interface ReplicaStatusInput {
  current: ReplicaStatus | undefined;
  selector: LabelSelector;
  paused: boolean;
  pausedWording: PausedWording;
  /** The objects that count (managed, not final, not being deleted). */
  replicas: number;
  readyReplicas: number;
  failure?: ReplicaFailure;
  now: Date;
}

export function nextReplicaStatus(i: ReplicaStatusInput): ReplicaStatus {
  let conditions = i.current?.conditions ?? [];
  conditions = i.paused
    ? setCondition(conditions, { type: 'ReplicaPaused', status: 'True', ...i.pausedWording }, i.now)
    : removeCondition(conditions, 'ReplicaPaused');
  conditions = i.failure
    ? setCondition(conditions, { type: 'ReplicaFailure', status: 'True', ...i.failure }, i.now)
    : removeCondition(conditions, 'ReplicaFailure');
  return {
    ...(i.current ?? {}),
    replicas: i.replicas,
    readyReplicas: i.readyReplicas,
    labelSelector: selectorString(i.selector),
    conditions,
  };
}

/** The status fields the replica controllers own. */
export const REPLICA_STATUS_FIELDS = ['replicas', 'readyReplicas', 'labelSelector', 'conditions'] as const;

/** What changed between two statuses worth an event: paused turned on or off. */
export function pauseEvent(before: ReplicaStatus | undefined, after: ReplicaStatus): 'paused' | 'resumed' | undefined {
  const was = Boolean(before?.conditions?.some((c) => c.type === 'ReplicaPaused'));
  const is = Boolean(after.conditions?.some((c) => c.type === 'ReplicaPaused'));
  return was === is ? undefined : is ? 'paused' : 'resumed';
}

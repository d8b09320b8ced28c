// The VMI controller's pure half: whether a VMI needs a launcher pod, and the
// VMI status the cluster side owns, from the VMI and its launcher pod.
//
//   Pending     no launcher pod yet (or creating it failed: Synchronized False)
//   Scheduling  the launcher pod exists and is not bound; the pod's
//               PodScheduled=False condition is copied (ErrorUnschedulable)
//   Scheduled   the pod is bound: status.nodeName is the pod's node
//   Running, Succeeded, Failed   written by the node agent; never moved back
//
// Two cases end a VMI here: its launcher pod terminated (Failed/Succeeded,
// but not Migrated: then the VM runs on elsewhere) while the VMI is not
// final, and its pod vanished after the VMI was scheduled onto it. A Running VMI belongs to the node agent, which writes the
// final phase when the guest stops and the pod with it, so a terminated pod
// fails a Running VMI only after AGENT_GRACE_MS, when the agent evidently did
// not. Pure: the caller passes the time and reads `recheckAfterMs`.
import type { V1Pod } from '@kubernetes/client-node';
import { removeCondition, setCondition } from '../kubevirt/conditions.js';
import type { VirtualMachineInstance, VirtualMachineInstanceStatus, VmiPhase } from '../kubevirt/types.js';

/** How long the node agent has to report a Running VMI's end before its terminated pod fails it. */
export const AGENT_GRACE_MS = 30_000;

const FINAL: ReadonlySet<VmiPhase> = new Set(['Succeeded', 'Failed']);
const BEFORE_SCHEDULED: ReadonlySet<VmiPhase> = new Set(['', 'Pending', 'Scheduling']);

const phaseOf = (vmi: VirtualMachineInstance): VmiPhase => vmi.status?.phase ?? '';
const podTerminated = (pod: V1Pod | undefined): boolean => pod?.status?.phase === 'Failed' || pod?.status?.phase === 'Succeeded';

/** The VMI needs a launcher pod created: none exists, it is not being deleted, and none was created for it before. */
export function needsLauncherPod(vmi: VirtualMachineInstance, pod: V1Pod | undefined): boolean {
  const phase = phaseOf(vmi);
  return !pod && !vmi.metadata.deletionTimestamp && (phase === '' || phase === 'Pending');
}

/** When the pod terminated, as far as its status says. */
function terminatedAtMs(pod: V1Pod): number | undefined {
  const finished = pod.status?.containerStatuses?.[0]?.state?.terminated?.finishedAt;
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'False')?.lastTransitionTime;
  const at = finished ?? ready;
  return at ? new Date(at).getTime() : undefined;
}

export interface VmiStatusInput {
  vmi: VirtualMachineInstance;
  /** The VMI's launcher pod; absent only when the API server confirmed there is none. */
  pod?: V1Pod;
  /** Creating the launcher pod failed in this sync. */
  createError?: string;
  now: Date;
}

export interface VmiStatusDecision {
  status: VirtualMachineInstanceStatus;
  /** Sync again after this long: a decision waits for time to pass. */
  recheckAfterMs?: number;
}

function withPhase(status: VirtualMachineInstanceStatus, phase: VmiPhase, now: Date): VirtualMachineInstanceStatus {
  if ((status.phase ?? '') === phase) return status;
  return {
    ...status,
    phase,
    phaseTransitionTimestamps: [...(status.phaseTransitionTimestamps ?? []), { phase, phaseTransitionTimestamp: now.toISOString() }],
  };
}

export function nextVmiStatus({ vmi, pod, createError, now }: VmiStatusInput): VmiStatusDecision {
  const current: VirtualMachineInstanceStatus = vmi.status ?? {};
  const phase = phaseOf(vmi);
  if (FINAL.has(phase) || vmi.metadata.deletionTimestamp) return { status: current };

  // The VM migrated away: the VMI lives on, on its target, and the migration controller moves it there.
  if (pod && podTerminated(pod) && pod.status?.reason === 'Migrated') return { status: current };
  if (pod && podTerminated(pod)) {
    if (phase === 'Running') {
      const waitedMs = now.getTime() - (terminatedAtMs(pod) ?? now.getTime());
      if (waitedMs < AGENT_GRACE_MS) return { status: current, recheckAfterMs: AGENT_GRACE_MS - waitedMs };
    }
    const reason = pod.status?.phase === 'Failed' ? 'LauncherPodFailed' : 'LauncherPodSucceeded';
    return { status: { ...withPhase(current, 'Failed', now), reason } };
  }

  if (!pod) {
    // Scheduling is written only after the pod was created, so a missing pod was deleted.
    if (phase === 'Scheduling' || phase === 'Scheduled')
      return { status: { ...withPhase(current, 'Failed', now), reason: 'LauncherPodDeleted' } };
    if (phase === 'Running') return { status: current };
    const conditions = createError
      ? setCondition(current.conditions, { type: 'Synchronized', status: 'False', reason: 'FailedCreate', message: createError }, now)
      : current.conditions;
    return { status: { ...withPhase(current, 'Pending', now), ...(conditions ? { conditions } : {}) } };
  }

  if (!BEFORE_SCHEDULED.has(phase)) return { status: current };
  // The pod exists: creating it succeeded, whatever failed before (other Synchronized reasons are the agent's).
  let conditions = current.conditions?.some((c) => c.type === 'Synchronized' && c.reason === 'FailedCreate')
    ? removeCondition(current.conditions, 'Synchronized')
    : current.conditions;
  const nodeName = pod.spec?.nodeName;
  if (nodeName) {
    conditions = removeCondition(conditions, 'PodScheduled');
    return { status: { ...withPhase(current, 'Scheduled', now), nodeName, conditions } };
  }
  const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  conditions =
    scheduled?.status === 'False'
      ? setCondition(
          conditions,
          {
            type: 'PodScheduled',
            status: 'False',
            ...(scheduled.reason ? { reason: scheduled.reason } : {}),
            ...(scheduled.message ? { message: scheduled.message } : {}),
          },
          now,
        )
      : removeCondition(conditions, 'PodScheduled');
  return { status: { ...withPhase(current, 'Scheduling', now), conditions } };
}

/** The VMI status fields the cluster side writes (the node agent writes the rest and the later phases). */
export const VMI_STATUS_FIELDS = ['phase', 'phaseTransitionTimestamps', 'nodeName', 'reason', 'conditions'] as const;

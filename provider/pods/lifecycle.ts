// One pod's VM lifecycle, as kubelet's pod_workers.go keeps a pod's: an
// explicit state, the history that outlives a run, and what the VM is
// attached to. Every transition is in `transition`; it is pure, and the
// controller does the I/O and feeds what happened back in as events.
//
//   from                                   event            to
//   Waiting, Running (launcher gone)       startBegan       Preparing
//   ImageBackOff, once retryAtMs is due    startBegan       Preparing, retrying it
//   Preparing                              started          Running
//   Preparing                              imageMissing     ImageBackOff: ErrImagePull, then ImagePullBackOff (or the
//                                                           pull's own reason: ErrImageNeverPull, InvalidImageName);
//                                                           retried after 10 s doubling to 5 min
//   Preparing; Waiting or a due back-off   startFailed      StartBackOff: CreateContainerError with the failure's message
//     (the network failed before a start)                   (the node's disk full, a launcher that could not start);
//                                                           retried after 10 s doubling to 5 min, failed pulls counted in
//   StartBackOff, once retryAtMs is due    startBegan       Preparing, retrying it
//   Running                                specSynced       Running, with the hash of the spec its launcher has
//   any but Terminating                    stopSeen         the same; the history notes when the stop was first seen
//   Waiting, Running                       ended            BackingOff (10 s doubling to 5 min, from 10 s again
//                                                           after a 10-min run) or, if restartPolicy says so, Finished
//   BackingOff, once untilMs is due        restart          Waiting, restartCount + 1
//   any but Preparing, Terminating         launcherRunning  Running (a launcher adopted, or found running)
//   any but Terminating                    invalid          Invalid
//   Invalid, found in translation          valid            Waiting (what the node found starting it stays)
//   any but Terminating                    admitted         the same, admitted: the node's admission took it
//   any but Terminating                    evicted          Evicted: refused by the node's admission (under disk
//                                                           pressure, or short of cpu, memory, pods: the reason
//                                                           says), or its disks outgrew its ephemeral-storage
//                                                           limit; final, whatever the restart policy
//   any                                    deleting         Terminating
//   Waiting                                incoming         Incoming: a live migration's target pod; its launcher
//                                                           receives the running VM and never boots it
//   Incoming                               incomingPrepared Incoming, prepared: the launcher waits for the VM
//   Incoming                               resumed          Running: the VM arrived and runs here
//   Incoming                               ended            Finished, whatever the restart policy: a target
//                                                           launcher that is gone cannot receive the VM again
//
// Any other pair leaves the lifecycle as it is (the same object: callers
// compare by identity to see a change); an Evicted lifecycle moves only to
// Terminating. A pod is admitted (`admitted`) once the node's admission
// took it, from its first start on, or once a launcher of it is found
// running; the admission judges only pods not admitted yet, as the
// kubelet's judges only new pods.
import type { V1Pod } from '@kubernetes/client-node';
import { keyOfObject } from '../kube/informer.js';
import type { ImageErrorReason, ImagePullReason } from '../images/errors.js';
import type { VmAttachment } from '../network/pod-network.js';
import type { VmObservation } from './status.js';
import type { VmiSpecResult } from './vmi-source.js';

export interface RestartBackoff {
  /** First delay before restarting a stopped VM; doubles per restart (kubelet: 10 s). Image pulls retry on the same scale. */
  initialMs: number;
  /** Cap (kubelet: 5 min). */
  maxMs: number;
  /** A run longer than this resets the backoff (kubelet: 10 min). */
  resetAfterMs: number;
}

export const DEFAULT_RESTART_BACKOFF: RestartBackoff = { initialMs: 10_000, maxMs: 300_000, resetAfterMs: 600_000 };

export interface ImageError {
  reason: ImageErrorReason;
  message: string;
}

export interface ImageBackOff {
  kind: 'ImageBackOff';
  /** Failed pulls in a row. */
  failures: number;
  error: ImageError;
  /** No new pull before this time, however often the pod changes. */
  retryAtMs: number;
}

/** A start failed for another reason than its image; its launcher is gone, and the next attempt waits. */
export interface StartBackOff {
  kind: 'StartBackOff';
  /** Failed attempts in a row. */
  failures: number;
  message: string;
  /** No new attempt before this time, however often the pod or its launcher's directory changes. */
  retryAtMs: number;
}

/** Where an invalid spec was found: translating the pod or VMI, or by the launcher when it started the VM. */
export type InvalidFound = 'translation' | 'start';

export type LifecycleState =
  /** No run under way: the next sync starts one (a new pod, after a failed start, after a restart's back-off). */
  | { kind: 'Waiting' }
  /** A start is under way: launcher, disks, boot. A retried pull or start still shows its last failure meanwhile. */
  | { kind: 'Preparing'; retrying?: ImageBackOff | StartBackOff }
  /** A launcher holds this run; its VM may have stopped since, which the next sync sees. */
  | { kind: 'Running'; specHash?: string }
  /** The run ended and restartPolicy brings it back, after `delayMs`. */
  | { kind: 'BackingOff'; untilMs: number; delayMs: number }
  | ImageBackOff
  | StartBackOff
  /** The pod cannot be realized as written; the message names the fields. */
  /**
   * Where it was found matters: a spec that translates again may have been fixed (a VMI's Secret, say), but
   * what only the launcher finds (a host file refused) is found again by every start.
   */
  | { kind: 'Invalid'; message: string; found: InvalidFound }
  /** The run ended and restartPolicy leaves it ended. */
  | { kind: 'Finished' }
  /**
   * The node refused the pod (reason Evicted under pressure, OutOfmemory, OutOfcpu... short of resources), or
   * stopped its VM for the disk it used (Evicted); final. No reason is Evicted.
   */
  | { kind: 'Evicted'; message: string; reason?: string }
  /** The target of live migration `migrationUid` (provider/migration/target.ts); `prepared` once its launcher waits for the VM. */
  | { kind: 'Incoming'; migrationUid: string; prepared: boolean }
  | Terminating;

/** The pod is being deleted; until it is gone its status still shows what it was (Invalid, ImageBackOff, ...). */
export interface Terminating {
  kind: 'Terminating';
  was: LifecycleState;
}

/** What outlives a run; after an agent restart it is read back from the pod status. */
export interface RunHistory {
  restartCount: number;
  lastTermination?: VmObservation['lastTermination'];
  /** When the agent first saw the current run stopped; the finish time when the launcher could not say. */
  stoppedSeenAt?: Date;
}

/** A VMI's launcher pod: what its VMI asks beyond the VmSpec (paused, unsupported fields, its reference for events). */
export type VmiContext = Omit<VmiSpecResult, 'spec'>;

export interface PodLifecycle {
  readonly uid: string;
  /** `namespace/name` of the pod. */
  readonly key: string;
  readonly state: LifecycleState;
  readonly history: RunHistory;
  /** Where the VM sits on the pod network, once attached. */
  readonly attachment?: VmAttachment;
  readonly vmi?: VmiContext;
  /** The registry image the VM runs, as repository@digest (the container's imageID). */
  readonly imageID?: string;
  /** The node admitted the pod: its admission took it, a start began, or a launcher of it was found running. */
  readonly admitted: boolean;
}

export type LifecycleEvent =
  | { type: 'startBegan' }
  | { type: 'started'; specHash: string }
  /** `reason`: a registry pull's (provider/images/); a missing host file is an ErrImagePull. */
  | { type: 'imageMissing'; message: string; reason?: ImagePullReason }
  | { type: 'startFailed'; message: string }
  | { type: 'specSynced'; specHash: string }
  | { type: 'launcherRunning' }
  /** The VM's run is over: seen first (the launcher may still be exiting) ... */
  | { type: 'stopSeen' }
  /** ... then decided on, from the launcher's last word. */
  | { type: 'ended'; vm: VmObservation | undefined; restartPolicy: string }
  | { type: 'restart' }
  | { type: 'invalid'; message: string; found: InvalidFound }
  | { type: 'valid' }
  | { type: 'admitted' }
  /** `message`: the pod status's, as the kubelet words it; `reason` the status's, Evicted when absent. */
  | { type: 'evicted'; message: string; reason?: string }
  | { type: 'deleting' }
  | { type: 'incoming'; migrationUid: string }
  | { type: 'incomingPrepared' }
  | { type: 'resumed' };

/** A pod first seen by this agent; after a restart its status is the only memory of earlier runs. */
export function newLifecycle(pod: V1Pod): PodLifecycle {
  const cs = pod.status?.containerStatuses?.[0];
  const last = cs?.lastState?.terminated;
  const stoppedAt = cs?.state?.terminated?.finishedAt;
  return {
    uid: pod.metadata!.uid!,
    key: keyOfObject(pod),
    state: { kind: 'Waiting' },
    history: {
      restartCount: cs?.restartCount ?? 0,
      ...(last?.finishedAt
        ? {
            lastTermination: {
              reason: last.reason ?? 'Error',
              exitCode: last.exitCode,
              ...(last.message ? { message: last.message } : {}),
              finishedAt: last.finishedAt,
              ...(last.startedAt ? { startedAt: last.startedAt } : {}),
            },
          }
        : {}),
      ...(stoppedAt ? { stoppedSeenAt: stoppedAt } : {}),
    },
    ...(cs?.imageID?.includes('@sha256:') ? { imageID: cs.imageID } : {}),
    // An earlier agent started it: it ran, or a start of it is under way or backing off.
    admitted: pod.status?.phase === 'Running' || (cs?.restartCount ?? 0) > 0 || !!cs?.state?.running || !!cs?.lastState?.terminated,
  };
}

function restartAllowed(restartPolicy: string, vm: VmObservation | undefined): boolean {
  if (restartPolicy === 'Never') return false;
  if (restartPolicy === 'OnFailure') return vm?.phase === 'Failed';
  return true;
}

function backOff(lc: PodLifecycle, vm: VmObservation | undefined, nowMs: number, policy: RestartBackoff): PodLifecycle {
  const ranMs = vm?.startedAt && vm.finishedAt ? vm.finishedAt.getTime() - vm.startedAt.getTime() : 0;
  const exponent = ranMs > policy.resetAfterMs ? 0 : lc.history.restartCount;
  const delayMs = Math.min(policy.initialMs * 2 ** exponent, policy.maxMs);
  const lastTermination = {
    reason: vm?.phase === 'Succeeded' ? 'Completed' : 'Error',
    exitCode: vm?.phase === 'Succeeded' ? 0 : 1,
    ...(vm?.message ? { message: vm.message } : {}),
    finishedAt: vm?.finishedAt ?? new Date(nowMs),
    ...(vm?.startedAt ? { startedAt: vm.startedAt } : {}),
  };
  return { ...lc, state: { kind: 'BackingOff', untilMs: nowMs + delayMs, delayMs }, history: { ...lc.history, lastTermination } };
}

function imageMissing(
  lc: PodLifecycle,
  retrying: ImageBackOff | undefined,
  event: { message: string; reason?: ImagePullReason },
  nowMs: number,
  policy: RestartBackoff,
): PodLifecycle {
  const failures = (retrying?.failures ?? 0) + 1;
  const delayMs = Math.min(policy.initialMs * 2 ** (failures - 1), policy.maxMs);
  const pulled = event.reason ?? 'ErrImagePull';
  const error: ImageError = { reason: pulled === 'ErrImagePull' && failures > 1 ? 'ImagePullBackOff' : pulled, message: event.message };
  return { ...lc, state: { kind: 'ImageBackOff', failures, error, retryAtMs: nowMs + delayMs } };
}

const to = (lc: PodLifecycle, state: LifecycleState): PodLifecycle => ({ ...lc, state });

export function transition(
  lc: PodLifecycle,
  event: LifecycleEvent,
  nowMs: number,
  policy: RestartBackoff = DEFAULT_RESTART_BACKOFF,
): PodLifecycle {
  const s = lc.state;
  if (s.kind === 'Terminating') return lc;
  if (s.kind === 'Evicted' && event.type !== 'deleting') return lc;
  switch (event.type) {
    case 'deleting':
      return to(lc, { kind: 'Terminating', was: s });
    case 'admitted':
      return lc.admitted ? lc : { ...lc, admitted: true };
    case 'evicted':
      return to(lc, { kind: 'Evicted', message: event.message, ...(event.reason ? { reason: event.reason } : {}) });
    case 'invalid':
      return s.kind === 'Invalid' && s.message === event.message
        ? lc
        : to(lc, { kind: 'Invalid', message: event.message, found: event.found });
    case 'valid':
      return s.kind === 'Invalid' && s.found === 'translation' ? to(lc, { kind: 'Waiting' }) : lc;
    case 'startBegan':
      if (s.kind === 'Waiting' || s.kind === 'Running') return { ...lc, admitted: true, state: { kind: 'Preparing' } };
      if ((s.kind === 'ImageBackOff' || s.kind === 'StartBackOff') && nowMs >= s.retryAtMs)
        return { ...to(lc, { kind: 'Preparing', retrying: s }), admitted: true };
      return lc;
    case 'started':
      return s.kind === 'Preparing' ? to(lc, { kind: 'Running', specHash: event.specHash }) : lc;
    case 'imageMissing':
      return s.kind === 'Preparing'
        ? imageMissing(lc, s.retrying?.kind === 'ImageBackOff' ? s.retrying : undefined, event, nowMs, policy)
        : lc;
    case 'startFailed': {
      // In its launcher (Preparing), or before it, setting up the network (Waiting, or a back-off that is due).
      let previous: ImageBackOff | StartBackOff | undefined;
      if (s.kind === 'Preparing') previous = s.retrying;
      else if ((s.kind === 'ImageBackOff' || s.kind === 'StartBackOff') && nowMs >= s.retryAtMs) previous = s;
      else if (s.kind !== 'Waiting') return lc;
      const failures = (previous?.failures ?? 0) + 1;
      const delayMs = Math.min(policy.initialMs * 2 ** (failures - 1), policy.maxMs);
      return to(lc, { kind: 'StartBackOff', failures, message: event.message, retryAtMs: nowMs + delayMs });
    }
    case 'specSynced':
      return s.kind === 'Running' && s.specHash !== event.specHash ? to(lc, { kind: 'Running', specHash: event.specHash }) : lc;
    case 'launcherRunning':
      // A target's launcher runs long before the VM arrives.
      return s.kind === 'Running' || s.kind === 'Preparing' || s.kind === 'Incoming'
        ? lc
        : { ...lc, admitted: true, state: { kind: 'Running' } };
    case 'stopSeen':
      return lc.history.stoppedSeenAt ? lc : { ...lc, history: { ...lc.history, stoppedSeenAt: new Date(nowMs) } };
    case 'ended':
      if (s.kind === 'Incoming') return to(lc, { kind: 'Finished' });
      if (s.kind !== 'Waiting' && s.kind !== 'Running') return lc;
      return restartAllowed(event.restartPolicy, event.vm) ? backOff(lc, event.vm, nowMs, policy) : to(lc, { kind: 'Finished' });
    case 'incoming':
      return s.kind === 'Waiting'
        ? { ...lc, admitted: true, state: { kind: 'Incoming', migrationUid: event.migrationUid, prepared: false } }
        : lc;
    case 'incomingPrepared':
      return s.kind === 'Incoming' && !s.prepared ? to(lc, { ...s, prepared: true }) : lc;
    case 'resumed':
      return s.kind === 'Incoming' ? to(lc, { kind: 'Running' }) : lc;
    case 'restart': {
      if (s.kind !== 'BackingOff' || nowMs < s.untilMs) return lc;
      const { stoppedSeenAt: _, ...history } = lc.history;
      return { ...lc, state: { kind: 'Waiting' }, history: { ...history, restartCount: history.restartCount + 1 } };
    }
  }
}

/** How long until a back-off lets the next attempt run; 0 when it may run now. */
export function waitMs(state: LifecycleState, nowMs: number): number {
  if (state.kind === 'BackingOff') return Math.max(0, state.untilMs - nowMs);
  if (state.kind === 'ImageBackOff' || state.kind === 'StartBackOff') return Math.max(0, state.retryAtMs - nowMs);
  return 0;
}

// Pod status derived in one place, by one ordered table: the first matching
// row decides the container state and pod phase. Nothing else in the agent
// sets phase, conditions or container statuses.
import type { V1ContainerState, V1ContainerStatus, V1Pod, V1PodCondition, V1PodStatus } from '@kubernetes/client-node';
import type { GuestOsInfo } from '../../launcher/agent-api.js';
import type { ImageErrorReason } from '../images/errors.js';

/** What the agent knows about a pod's VM, gathered from the launcher and the sync loop. */
export interface VmObservation {
  /** Launcher phase; absent before the launcher reported anything. */
  phase?: 'Pending' | 'Running' | 'Paused' | 'Succeeded' | 'Failed';
  reason?: string;
  message?: string;
  startedAt?: Date;
  finishedAt?: Date;
  domainUUID?: string;
  /** The guest is ready: its readiness probe passes, or, without one, it produced console output. */
  guestReady: boolean;
  /** The guest agent has its channel open. */
  agentConnected?: boolean;
  /** What the guest agent reported about the guest OS. */
  guestOsInfo?: GuestOsInfo;
  restartCount: number;
  /** The previous run's end, shown as lastState after a restart. */
  /** `message` says why it ended (the launcher died, QEMU failed...), as the terminated state did while it was current. */
  lastTermination?: { reason: string; exitCode: number; message?: string; startedAt?: Date; finishedAt: Date };
}

export interface PodStatusInput {
  pod: V1Pod;
  now: Date;
  hostIP: string;
  podIP?: string;
  /** The pod cannot be realized as written (SpecError): terminal. */
  invalid?: { reason: 'InvalidVMSpec'; message: string };
  /** The node refused the pod (reason Evicted, OutOfmemory...), or stopped its VM for the disk it used (Evicted): terminal. */
  evicted?: { message: string; reason?: string };
  /** The boot image could not be fetched or found. */
  imageError?: { reason: ImageErrorReason; message: string };
  /** The registry image the VM runs, as repository@digest; the container's image otherwise. */
  imageID?: string;
  /** The last start failed for another reason than its image; retried with back-off. */
  startError?: { message: string };
  /** Disks are being prepared / image being pulled. */
  preparing?: boolean;
  /** Waiting out a restart backoff after the VM stopped. */
  backoff?: { message: string };
  vm?: VmObservation;
  /** A live migration's target pod: receiving the VM; `prepared` once its launcher waits for it. */
  incoming?: { prepared: boolean };
  /** The node's report on the live migration this pod takes part in (provider/migration/conditions.ts). */
  migration?: { type: string; reason: string; message: string };
}

type Phase = 'Pending' | 'Running' | 'Succeeded' | 'Failed';

interface Row {
  when: (i: PodStatusInput) => boolean;
  phase: (i: PodStatusInput) => Phase;
  state: (i: PodStatusInput) => V1ContainerState;
  ready: (i: PodStatusInput) => boolean;
  /** Pod-level reason/message, as the kubelet sets them for terminal failures. */
  podReason?: (i: PodStatusInput) => { reason: string; message: string } | undefined;
}

const restartPolicy = (i: PodStatusInput) => i.pod.spec?.restartPolicy ?? 'Always';
const waiting = (reason: string, message?: string): V1ContainerState => ({ waiting: { reason, ...(message ? { message } : {}) } });
const exitCodeOf = (i: PodStatusInput) => (i.vm?.phase === 'Succeeded' ? 0 : 1);
const terminated = (i: PodStatusInput): V1ContainerState => ({
  terminated: {
    exitCode: exitCodeOf(i),
    reason: i.vm?.phase === 'Succeeded' ? 'Completed' : 'Error',
    ...(i.vm?.message ? { message: i.vm.message } : {}),
    ...(i.vm?.startedAt ? { startedAt: i.vm.startedAt } : {}),
    finishedAt: i.vm?.finishedAt ?? i.now,
    ...(i.vm?.domainUUID ? { containerID: `vkvm://${i.vm.domainUUID}` } : {}),
  },
});
/**
 * The VM's run ended. Not while a start is under way: a launcher that exits
 * during its start (a missing image) is that attempt failing, which the
 * start reports itself (ErrImagePull, InvalidVMSpec, or a retried error).
 */
const stopped = (i: PodStatusInput) => !i.preparing && (i.vm?.phase === 'Succeeded' || i.vm?.phase === 'Failed');
/** A stopped VM is final unless restartPolicy brings it back; a pod being deleted never comes back. */
const final = (i: PodStatusInput) =>
  stopped(i) &&
  (Boolean(i.pod.metadata?.deletionTimestamp) ||
    restartPolicy(i) === 'Never' ||
    (restartPolicy(i) === 'OnFailure' && i.vm?.phase === 'Succeeded'));

/** The ordered table: first match wins; the last row is the fallback. */
const ROWS: Row[] = [
  {
    when: (i) => Boolean(i.invalid),
    phase: () => 'Failed',
    state: (i) => waiting('InvalidVMSpec', i.invalid!.message),
    ready: () => false,
    podReason: (i) => ({ reason: i.invalid!.reason, message: i.invalid!.message }),
  },
  {
    when: (i) => Boolean(i.evicted),
    phase: () => 'Failed',
    // 137: the VM was killed, as a container's exit code says (128 + SIGKILL).
    state: (i) => ({
      terminated: {
        exitCode: 137,
        reason: i.evicted!.reason ?? 'Evicted',
        message: i.evicted!.message,
        ...(i.vm?.startedAt ? { startedAt: i.vm.startedAt } : {}),
        finishedAt: i.vm?.finishedAt ?? i.now,
      },
    }),
    ready: () => false,
    podReason: (i) => ({ reason: i.evicted!.reason ?? 'Evicted', message: i.evicted!.message }),
  },
  {
    // Pulls are retried with back-off whatever the restart policy, as the kubelet does: not final.
    when: (i) => Boolean(i.imageError) && !i.pod.metadata?.deletionTimestamp,
    phase: (i) => (i.vm?.restartCount ? 'Running' : 'Pending'),
    state: (i) => waiting(i.imageError!.reason, i.imageError!.message),
    ready: () => false,
  },
  {
    // The kubelet's reason for a container it could not create; retried, so not final either.
    when: (i) => Boolean(i.startError) && !i.pod.metadata?.deletionTimestamp,
    phase: (i) => (i.vm?.restartCount ? 'Running' : 'Pending'),
    state: (i) => waiting('CreateContainerError', i.startError!.message),
    ready: () => false,
  },
  {
    when: final,
    phase: (i) => (i.vm?.phase === 'Succeeded' ? 'Succeeded' : 'Failed'),
    state: terminated,
    ready: () => false,
    // The VM left for another node: the VMI lives on, so its controllers must not read this as the VM's end.
    podReason: (i) =>
      i.vm?.phase === 'Succeeded' && i.vm.reason === 'Migrated'
        ? { reason: 'Migrated', message: 'the VM migrated to another node' }
        : undefined,
  },
  {
    // The target of a live migration: Running once it waits for the VM, so the migration may hand off to it.
    when: (i) => Boolean(i.incoming) && !stopped(i),
    phase: (i) => (i.incoming!.prepared ? 'Running' : 'Pending'),
    state: (i) =>
      i.incoming!.prepared
        ? { running: { startedAt: i.vm?.startedAt ?? i.now } }
        : waiting('ContainerCreating', 'preparing to receive a live migration'),
    ready: () => false,
  },
  {
    when: (i) => Boolean(i.backoff),
    phase: (i) => (i.vm?.restartCount ? 'Running' : 'Pending'),
    state: (i) => waiting('CrashLoopBackOff', i.backoff!.message),
    ready: () => false,
  },
  {
    when: (i) => i.vm?.phase === 'Running' || i.vm?.phase === 'Paused',
    phase: () => 'Running',
    state: (i) => ({ running: { startedAt: i.vm?.startedAt ?? i.now } }),
    ready: (i) => i.vm?.phase === 'Running' && i.vm.guestReady,
  },
  {
    when: stopped,
    phase: (i) => (i.vm?.restartCount ? 'Running' : 'Pending'),
    state: terminated,
    ready: () => false,
  },
  {
    when: () => true,
    // A restart keeps the pod Running, as the kubelet does while it restarts a container.
    phase: (i) => (i.vm?.restartCount ? 'Running' : 'Pending'),
    state: (i) => waiting('ContainerCreating', i.preparing ? 'preparing disks and starting the VM' : undefined),
    ready: () => false,
  },
];

function condition(type: string, ok: boolean, now: Date, previous: V1PodCondition[], reason?: string): V1PodCondition {
  const status = ok ? 'True' : 'False';
  const prev = previous.find((c) => c.type === type);
  return {
    type,
    status,
    lastTransitionTime: prev?.status === status && prev.lastTransitionTime ? prev.lastTransitionTime : now,
    ...(ok || !reason ? {} : { reason }),
  } as V1PodCondition;
}

/** A migration report: always True; it moves (and its time with it) when its reason or message does. */
function migrationCondition(m: NonNullable<PodStatusInput['migration']>, now: Date, previous: V1PodCondition[]): V1PodCondition {
  const prev = previous.find((c) => c.type === m.type);
  const same = prev?.status === 'True' && prev.reason === m.reason && prev.message === m.message;
  return {
    type: m.type,
    status: 'True',
    reason: m.reason,
    message: m.message,
    lastTransitionTime: same && prev.lastTransitionTime ? prev.lastTransitionTime : now,
  } as V1PodCondition;
}

export function derivePodStatus(i: PodStatusInput): V1PodStatus {
  const row = ROWS.find((r) => r.when(i))!;
  const phase = row.phase(i);
  const ready = row.ready(i);
  const previous = i.pod.status?.conditions ?? [];
  const container = i.pod.spec?.containers?.[0];
  const notReadyReason = phase === 'Succeeded' || phase === 'Failed' ? 'PodCompleted' : 'ContainersNotReady';
  const containerStatus: V1ContainerStatus | undefined = container && {
    name: container.name,
    image: container.image ?? '',
    imageID: i.imageID ?? container.image ?? '',
    ready,
    started: 'running' in row.state(i),
    restartCount: i.vm?.restartCount ?? 0,
    state: row.state(i),
    ...(i.vm?.domainUUID ? { containerID: `vkvm://${i.vm.domainUUID}` } : {}),
    ...(i.vm?.lastTermination
      ? {
          lastState: {
            terminated: {
              exitCode: i.vm.lastTermination.exitCode,
              reason: i.vm.lastTermination.reason,
              ...(i.vm.lastTermination.message ? { message: i.vm.lastTermination.message } : {}),
              finishedAt: i.vm.lastTermination.finishedAt,
              ...(i.vm.lastTermination.startedAt ? { startedAt: i.vm.lastTermination.startedAt } : {}),
            },
          },
        }
      : {}),
  };
  const status: V1PodStatus = {
    phase,
    conditions: [
      condition('PodScheduled', true, i.now, previous),
      condition('Initialized', true, i.now, previous),
      condition('ContainersReady', ready, i.now, previous, notReadyReason),
      condition('Ready', ready, i.now, previous, notReadyReason),
      ...(i.migration ? [migrationCondition(i.migration, i.now, previous)] : []),
    ],
    hostIP: i.hostIP,
    hostIPs: [{ ip: i.hostIP }],
    startTime: i.pod.status?.startTime ?? i.now,
    containerStatuses: containerStatus ? [containerStatus] : [],
  };
  if (i.podIP) {
    status.podIP = i.podIP;
    status.podIPs = [{ ip: i.podIP }];
  }
  const podReason = row.podReason?.(i);
  if (podReason) {
    status.reason = podReason.reason;
    status.message = podReason.message;
  }
  return status;
}

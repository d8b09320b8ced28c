// The VMI status the node agent writes, as virt-handler does: derived in one
// place from what the node observed of the VM. Pure.
//
//   phase        Running (also while paused), Succeeded or Failed once the VM
//                ran or ended; earlier phases are the cluster controller's
//   conditions   Ready; Paused (only while paused, reason PausedByUser when a
//                user paused it); AgentConnected (only while the guest agent
//                is connected); Synchronized False while the node cannot run
//                the VM (reason InvalidVMSpec naming the fields, Evicted, or
//                ErrImagePull / ImagePullBackOff, which the VM's printable
//                status reads, as virt-handler reports them); vkvm's
//                UnsupportedFields
//   guestOSInfo  what the guest agent reported, while it is connected
//   interfaces   the pod address and MAC once leased (for masquerade too, as
//                KubeVirt reports it, though that guest holds a private address)
//   LiveMigratable and migrationMethod (kubevirt/migratable.ts), once the VM
//                runs, as virt-handler sets them from a running domain
import type { VmObservation } from './status.js';
import type { VmAttachment } from '../network/pod-network.js';
import { removeCondition, setCondition, unsupportedMessage } from '../kubevirt/conditions.js';
import type { VirtualMachineInstanceStatus, VmiPhase } from '../kubevirt/types.js';
import type { LiveMigratability } from '../kubevirt/migratable.js';
import type { ImageErrorReason } from '../images/errors.js';

export interface NodeVmiStatusInput {
  current: VirtualMachineInstanceStatus;
  nodeName: string;
  vm?: VmObservation;
  /** Why the VM cannot run: the VMI fails (message names the fields). */
  invalid?: { reason: 'InvalidVMSpec'; message: string };
  /** The node refused its launcher pod, or stopped the VM for the disk it used: the VMI fails. */
  evicted?: { message: string };
  /** Its boot image cannot be had yet: the VMI waits, retried with back-off. */
  imageError?: { reason: ImageErrorReason; message: string };
  /** Its last start failed for another reason: the VMI waits, retried with back-off. */
  startError?: { message: string };
  /** KubeVirt fields the VM runs without. */
  unsupported: string[];
  /** Whether the VM can live-migrate, and how; absent leaves the condition as it is. */
  migratability?: LiveMigratability;
  /** Where the VM sits on the pod network. */
  attachment?: VmAttachment;
  now: Date;
}

/** The status fields the node owns (statusPatch writes only those that changed). */
export const NODE_VMI_STATUS_FIELDS = [
  'phase',
  'phaseTransitionTimestamps',
  'nodeName',
  'reason',
  'conditions',
  'guestOSInfo',
  'interfaces',
  'migrationMethod',
] as const;

/** KubeVirt's Paused condition reasons, by the launcher's pause reason; others are passed on. */
const PAUSED_REASONS: Readonly<Record<string, { reason: string; message: string }>> = {
  Paused: { reason: 'PausedByUser', message: 'VMI was paused by user' },
  IOError: { reason: 'PausedIOError', message: 'VMI was paused, low-level IO error detected' },
};

/** Synchronized reasons the node sets; others (FailedCreate) are the cluster controller's. */
const NODE_SYNC_REASONS = new Set([
  'InvalidVMSpec',
  'Evicted',
  'ErrImagePull',
  'ImagePullBackOff',
  'ErrImageNeverPull',
  'InvalidImageName',
  'CreateContainerError',
]);

/** The phase the node's view decides; undefined leaves the cluster controller's (Scheduled) as it is. */
function vmiPhaseOf(
  vm: VmObservation | undefined,
  trouble: Pick<NodeVmiStatusInput, 'imageError' | 'startError'> & { invalid?: { reason: string } },
): VmiPhase | undefined {
  if (trouble.invalid) return 'Failed';
  // A pull or start is retried: the VMI waits, whatever the failed attempt's launcher reported.
  if (trouble.imageError || trouble.startError) return undefined;
  if (vm?.phase === 'Running' || vm?.phase === 'Paused') return 'Running';
  if (vm?.phase === 'Succeeded' || vm?.phase === 'Failed') return vm.phase;
  return undefined;
}

export function nodeVmiStatus({
  current,
  nodeName,
  vm,
  invalid: invalidSpec,
  evicted,
  imageError,
  startError,
  unsupported,
  migratability,
  attachment,
  now,
}: NodeVmiStatusInput): VirtualMachineInstanceStatus {
  // An eviction fails the VMI as an invalid spec does, with its own reason.
  const invalid = invalidSpec ?? (evicted ? { reason: 'Evicted' as const, message: evicted.message } : undefined);
  const phase = vmiPhaseOf(vm, { invalid, imageError, startError });
  const ready = vm?.phase === 'Running' && vm.guestReady;
  let conditions = setCondition(
    current.conditions,
    ready
      ? { type: 'Ready', status: 'True' }
      : { type: 'Ready', status: 'False', reason: vm?.phase === 'Running' ? 'GuestNotReady' : 'NotRunning' },
    now,
  );
  conditions =
    vm?.phase === 'Paused'
      ? setCondition(
          conditions,
          {
            type: 'Paused',
            status: 'True',
            ...(PAUSED_REASONS[vm.reason ?? ''] ?? { reason: vm.reason ?? 'Paused', message: vm.message ?? '' }),
          },
          now,
        )
      : removeCondition(conditions, 'Paused');
  conditions = vm?.agentConnected
    ? setCondition(conditions, { type: 'AgentConnected', status: 'True' }, now)
    : removeCondition(conditions, 'AgentConnected');
  conditions = unsupported.length
    ? setCondition(
        conditions,
        { type: 'UnsupportedFields', status: 'True', reason: 'Ignored', message: unsupportedMessage(unsupported) },
        now,
      )
    : removeCondition(conditions, 'UnsupportedFields');
  const running = vm?.phase === 'Running' || vm?.phase === 'Paused';
  if (migratability && running)
    conditions = setCondition(
      conditions,
      migratability.migratable
        ? { type: 'LiveMigratable', status: 'True' }
        : { type: 'LiveMigratable', status: 'False', reason: migratability.reason, message: migratability.message },
      now,
    );
  const notSynced = invalid ?? imageError ?? (startError && { reason: 'CreateContainerError', message: startError.message });
  if (notSynced) {
    conditions = setCondition(
      conditions,
      { type: 'Synchronized', status: 'False', reason: notSynced.reason, message: notSynced.message },
      now,
    );
  } else if (NODE_SYNC_REASONS.has(conditions.find((c) => c.type === 'Synchronized')?.reason ?? '')) {
    conditions = removeCondition(conditions, 'Synchronized');
  }
  const next: VirtualMachineInstanceStatus = { ...current, nodeName, conditions };
  if (phase) next.phase = phase;
  if (migratability && running) next.migrationMethod = migratability.method;
  if (invalid) next.reason = invalid.reason;
  if (vm?.agentConnected && vm.guestOsInfo) next.guestOSInfo = vm.guestOsInfo;
  else delete next.guestOSInfo;
  if (attachment) {
    next.interfaces = [
      {
        name: attachment.interfaceName,
        ipAddress: attachment.podIP,
        ipAddresses: [attachment.podIP],
        mac: attachment.mac,
        infoSource: 'domain',
      },
    ];
  }
  if (phase && phase !== current.phase) {
    next.phaseTransitionTimestamps = [...(current.phaseTransitionTimestamps ?? []), { phase, phaseTransitionTimestamp: now.toISOString() }];
  }
  return next;
}

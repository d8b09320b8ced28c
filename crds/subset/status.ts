// The statuses vkvm writes: the VMI's (phase, node, conditions, addresses,
// guest OS) and the VM's (printable status, start failures). The schema types
// their strings; the types narrow them to the values KubeVirt defines.
import { statusRef } from './instancetype.js';
import type { RunStrategy } from './constants.js';
import { condition } from './condition.js';
import { alwaysSet, boolean, integer, list, notInCrd, object, string, stringMap, time } from './field.js';
import { migrationState, type MigrationMethod } from './migration.js';

export { condition, type ConditionStatus } from './condition.js';

export type VmiPhase = '' | 'Pending' | 'Scheduling' | 'Scheduled' | 'Running' | 'Succeeded' | 'Failed' | 'Unknown';

/** VMI condition types KubeVirt defines; vkvm sets the ones it can observe. */
export type VmiConditionType =
  'Ready' | 'Paused' | 'Synchronized' | 'AgentConnected' | 'LiveMigratable' | 'PodScheduled' | 'Provisioning' | (string & {});

export type VmConditionType = 'Ready' | 'Failure' | 'Paused' | 'RestartRequired' | (string & {});

/** KubeVirt's VirtualMachinePrintableStatus values (the `kubectl get vm` STATUS column). */
export type PrintableStatus =
  | 'Stopped'
  | 'Provisioning'
  | 'Starting'
  | 'Running'
  | 'Paused'
  | 'Stopping'
  | 'Terminating'
  | 'CrashLoopBackOff'
  | 'Migrating'
  | 'Unknown'
  | 'ErrorUnschedulable'
  | 'ErrImagePull'
  | 'ImagePullBackOff'
  | 'ErrorPvcNotFound'
  | 'DataVolumeError'
  | 'WaitingForVolumeBinding';

export const vmiStatus = object(
  {
    phase: string<VmiPhase>('Pending, Scheduling, Scheduled, Running, Succeeded, Failed or Unknown.'),
    /** A brief CamelCase reason for the current phase, e.g. NodeUnresponsive. */
    reason: string(),
    nodeName: string(),
    conditions: list(condition<VmiConditionType>()),
    interfaces: list(
      object(
        {
          /** The network / interface name. */
          name: string(),
          ipAddress: string(),
          ipAddresses: list(string()),
          mac: string(),
          /** The interface name inside the guest. */
          interfaceName: string(),
          /** domain, guest-agent or multus-status (comma-separated). */
          infoSource: string(),
        },
        { preserveUnknown: true },
      ),
    ),
    phaseTransitionTimestamps: list(
      object({ phase: alwaysSet(string<VmiPhase>()), phaseTransitionTimestamp: alwaysSet(time()) }, { preserveUnknown: true }),
    ),
    guestOSInfo: object(
      {
        id: string(),
        name: string(),
        prettyName: string(),
        version: string(),
        versionId: string(),
        kernelRelease: string(),
        kernelVersion: string(),
        machine: string(),
      },
      { preserveUnknown: true },
    ),
    /** A copy of the migration's state, written by the migration controller only. */
    migrationState,
    /** BlockMigration when local writable disks are copied, else LiveMigration. */
    migrationMethod: string<MigrationMethod>(),
    /** vkvm relays over unix sockets, as KubeVirt does. */
    migrationTransport: string<'Unix'>(),
    /** The node a drain asked this VMI to leave. */
    evacuationNodeName: string(),
  },
  { preserveUnknown: true },
);

/** Consecutive VMIs that failed before ever running, for the crash-loop back-off. */
export const startFailure = object(
  { consecutiveFailCount: integer(), lastFailedVMIUID: string(), retryAfterTimestamp: time() },
  { preserveUnknown: true },
);

export const vmStatus = object(
  {
    printableStatus: string<PrintableStatus>('Human readable status: Stopped, Starting, Running, ...'),
    /** The VMI exists and is Ready. */
    ready: boolean(),
    /** A VMI exists for this VM. */
    created: boolean(),
    conditions: list(condition<VmConditionType>()),
    startFailure,
    stateChangeRequests: notInCrd(
      list(
        object({
          /** Start or Stop (virtctl start/stop/restart write these). */
          action: alwaysSet(string<'Start' | 'Stop'>()),
          data: stringMap(),
          /** The VMI a Stop request applies to. */
          uid: string(),
        }),
      ),
    ),
    /** The run strategy the controller last acted on (RerunOnFailure needs it). */
    runStrategy: notInCrd(string<RunStrategy>()),
    /** The instancetype the VM uses and the ControllerRevision holding the copy its VMIs are made from. */
    instancetypeRef: statusRef,
    /** The same for the preference. */
    preferenceRef: statusRef,
  },
  { preserveUnknown: true },
);

// The VirtualMachineInstanceMigration (kubevirt.io/v1) and the migration
// state a VMI carries a copy of, with KubeVirt's wire names
// (staging/src/kubevirt.io/api/core/v1/types.go). The migration controller is
// the one writer of both statuses (docs/design/live-migration.md §2).
import { condition } from './condition.js';
import { alwaysSet, boolean, integer, list, object, required, string, stringMap, time } from './field.js';

export type MigrationPhase =
  '' | 'Pending' | 'Scheduling' | 'Scheduled' | 'PreparingTarget' | 'TargetReady' | 'Running' | 'Succeeded' | 'Failed';

export type MigrationAbortStatus = 'Succeeded' | 'Failed' | 'Aborting';
export type MigrationMode = 'PreCopy' | 'PostCopy' | 'Paused';
export type MigrationMethod = 'LiveMigration' | 'BlockMigration';

/** The settings one migration runs with: the controllers' flags, overridden by a MigrationPolicy. */
export const migrationConfiguration = object(
  {
    allowAutoConverge: boolean(),
    /** Bytes per second as a quantity; "0" is unlimited. */
    bandwidthPerMigration: string(),
    completionTimeoutPerGiB: integer(undefined, { format: 'int64' }),
    progressTimeout: integer(undefined, { format: 'int64' }),
    allowWorkloadDisruption: boolean(),
    allowPostCopy: boolean(),
  },
  { preserveUnknown: true },
);

/** VirtualMachineInstanceMigrationState: on the VMIM and, as a copy, on the VMI. */
export const migrationState = object(
  {
    migrationUid: string(),
    sourceNode: string(),
    sourcePod: string(),
    targetNode: string(),
    targetPod: string(),
    targetNodeAddress: string(),
    targetNodeDomainDetected: boolean(),
    targetNodeDomainReadyTimestamp: time(),
    startTimestamp: time(),
    endTimestamp: time(),
    completed: boolean(),
    failed: boolean(),
    failureReason: string(),
    abortRequested: boolean(),
    abortStatus: string<MigrationAbortStatus>(),
    mode: string<MigrationMode>(),
    migrationPolicyName: string(),
    migrationConfiguration,
  },
  { preserveUnknown: true },
);

export type MigrationConditionType = 'ReadyToAbort' | 'AbortRequested' | 'Rejected' | (string & {});

export const vmimSpec = object(
  {
    /** The VMI to migrate, in the migration's namespace. */
    vmiName: required(string('The name of the VMI to migrate.')),
    /** Labels the target node must carry as well; the VMI's own nodeSelector keys win. */
    addedNodeSelector: stringMap('Node labels the target must also match; they do not override the VMI nodeSelector.'),
  },
  { preserveUnknown: true, description: 'VirtualMachineInstanceMigrationSpec' },
);

export const vmimStatus = object(
  {
    phase: string<MigrationPhase>('Pending, Scheduling, Scheduled, PreparingTarget, TargetReady, Running, Succeeded or Failed.'),
    phaseTransitionTimestamps: list(
      object({ phase: alwaysSet(string<MigrationPhase>()), phaseTransitionTimestamp: alwaysSet(time()) }, { preserveUnknown: true }),
    ),
    conditions: list(condition<MigrationConditionType>()),
    migrationState,
  },
  { preserveUnknown: true },
);

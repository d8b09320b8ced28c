// Whether a Pending migration may start now: KubeVirt's limits on migrations
// in flight, per cluster and out of one node (virt-config.go: 5 and 2). A
// migration holds a slot from Scheduling until it is final; Pending ones wait
// and, among those competing for the last slot, the older goes first. Pure.
import type { VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import type { MigrationLimits } from './policy.js';

const HOLDS_SLOT: ReadonlySet<string> = new Set(['Scheduling', 'Scheduled', 'PreparingTarget', 'TargetReady', 'Running']);

export interface SlotInput {
  migration: VirtualMachineInstanceMigration;
  /** The migration's source node (its VMI's node). */
  sourceNode: string | undefined;
  /** Every VMIM in the cluster. */
  all: readonly VirtualMachineInstanceMigration[];
  /** The source node of another migration (from its migrationState, else its VMI). */
  sourceNodeOf: (m: VirtualMachineInstanceMigration) => string | undefined;
  limits: MigrationLimits;
}

const createdMs = (m: VirtualMachineInstanceMigration) => new Date(m.metadata.creationTimestamp ?? 0).getTime();

/** Undefined when a slot is free, else why the migration waits. */
export function slotRefusal(o: SlotInput): string | undefined {
  const self = o.migration.metadata.uid;
  const older = (m: VirtualMachineInstanceMigration) =>
    (m.status?.phase ?? '') === 'Pending' &&
    (createdMs(m) < createdMs(o.migration) ||
      (createdMs(m) === createdMs(o.migration) && (m.metadata.name ?? '') < (o.migration.metadata.name ?? '')));
  const ahead = o.all.filter((m) => m.metadata.uid !== self && (HOLDS_SLOT.has(m.status?.phase ?? '') || older(m)));
  if (ahead.length >= o.limits.perCluster)
    return `${ahead.length} migrations run or wait ahead in the cluster (at most ${o.limits.perCluster})`;
  if (!o.sourceNode) return undefined;
  const outbound = ahead.filter((m) => o.sourceNodeOf(m) === o.sourceNode).length;
  if (outbound >= o.limits.outboundPerNode)
    return `${outbound} migrations run or wait ahead out of node ${o.sourceNode} (at most ${o.limits.outboundPerNode})`;
  return undefined;
}

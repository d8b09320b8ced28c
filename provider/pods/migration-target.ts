// A live migration's target launcher pod (label kubevirt.io/migrationJobUID,
// made by the migration controller, provider/controllers/migration/) is owned
// by the VMI like the VMI's own pod, but it must never boot the VM as a second,
// fresh instance beside the running one: it receives the running VM
// (provider/migration/target.ts), and it speaks for the VMI's status only once
// the VMI runs on its node (docs/design/live-migration.md §3 step 4, §10
// risk 6). The source pod, once its VM left, no longer speaks for it either. Pure.
import type { V1Pod } from '@kubernetes/client-node';
import type { VirtualMachineInstance } from '../kubevirt/types.js';

/** The migration's uid, on its target pod: KubeVirt's label. */
export const MIGRATION_JOB_LABEL = 'kubevirt.io/migrationJobUID';

export const HELD_REASON = 'MigrationTargetHeld';

export const isMigrationTarget = (pod: V1Pod): boolean => Boolean(pod.metadata?.labels?.[MIGRATION_JOB_LABEL]);
export const migrationJobOf = (pod: V1Pod): string | undefined => pod.metadata?.labels?.[MIGRATION_JOB_LABEL];

/** Why a node that does not receive migrations (its relay off) holds this pod; undefined for any pod but a migration target. */
export function migrationTargetHold(pod: V1Pod): string | undefined {
  if (!isMigrationTarget(pod)) return undefined;
  return (
    `pod is the target of live migration ${migrationJobOf(pod)}: ` +
    'this node does not receive migrations (--migration-port=0), so it holds the pod Pending and never boots it as a new VM'
  );
}

/**
 * Whether this launcher pod's node writes the VMI's status: a migration
 * target only once the VMI runs on its node; a source not once its VM
 * migrated away (the VMI lives on, on the target).
 */
export function speaksForVmi(pod: V1Pod, vmi: VirtualMachineInstance, vm?: { phase?: string; reason?: string }): boolean {
  if (vm?.phase === 'Succeeded' && vm.reason === 'Migrated') return false;
  return !isMigrationTarget(pod) || vmi.status?.nodeName === pod.spec?.nodeName;
}

// A live migration's target launcher pod (label kubevirt.io/migrationJobUID,
// made by the migration controller, provider/controllers/migration/) is owned
// by the VMI like the VMI's own pod, but it must never boot the VM as a second,
// fresh instance beside the running one: it receives the running VM, and only
// the node's migration target side may act on it. Until that side takes such
// pods, the node holds them Pending, with an Event saying why, and never lets
// them speak for the VMI's status while the VMI runs elsewhere
// (docs/design/live-migration.md §3 step 4, §10 risk 6). Pure.
import type { V1Pod } from '@kubernetes/client-node';
import type { VirtualMachineInstance } from '../kubevirt/types.js';

/** The migration's uid, on its target pod: KubeVirt's label. */
export const MIGRATION_JOB_LABEL = 'kubevirt.io/migrationJobUID';
export const HELD_REASON = 'MigrationTargetHeld';

export const isMigrationTarget = (pod: V1Pod): boolean => Boolean(pod.metadata?.labels?.[MIGRATION_JOB_LABEL]);

/** Why the node does not start this pod's VM; undefined for any pod but a migration target. */
export function migrationTargetHold(pod: V1Pod): string | undefined {
  if (!isMigrationTarget(pod)) return undefined;
  return (
    `pod is the target of live migration ${pod.metadata!.labels![MIGRATION_JOB_LABEL]}: ` +
    'this node does not receive migrations yet, so it holds the pod Pending and never boots it as a new VM'
  );
}

/** Whether this launcher pod's node writes the VMI's status: a migration target only once the VMI runs on its node. */
export function speaksForVmi(pod: V1Pod, vmi: VirtualMachineInstance): boolean {
  return !isMigrationTarget(pod) || vmi.status?.nodeName === pod.spec?.nodeName;
}

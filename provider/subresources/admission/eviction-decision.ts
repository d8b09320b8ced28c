// What an eviction of a launcher pod does (the pods/eviction webhook, KubeVirt's
// admitters/pod-eviction-admitter.go), by the VMI's evictionStrategy, else the
// cluster's: allow it, or refuse it with 429 so `kubectl drain` retries while
// the VM migrates away (docs/design/live-migration.md §8). The first row that
// applies wins. Pure: the webhook carries out `evacuateFrom` (the VMI's
// status.evacuationNodeName, which the evacuation controller turns into a
// migration) and `blocked` (an Event on the VMI saying why the drain waits).
import type { V1Pod } from '@kubernetes/client-node';
import { findCondition } from '../../kubevirt/conditions.js';
import type { EvictionStrategy, VirtualMachineInstance } from '../../kubevirt/types.js';
import { LIVE_MIGRATABLE } from '../../controllers/migration/admission.js';
import { LAUNCHER_APP, LAUNCHER_APP_LABEL } from '../../controllers/launcher-pod.js';
import { isMigrationTarget } from '../../pods/migration-target.js';

export const EVICTION_BLOCKED = 'EvictionBlocked';

export type EvictionDecision =
  | { allowed: true; why: string }
  | {
      allowed: false;
      /** The 429's message, which `kubectl drain` prints on each retry. */
      message: string;
      /** Mark the VMI for evacuation from this node. */
      evacuateFrom?: string;
      /** The drain is blocked: record why on the VMI (kubevirt#9585). */
      blocked?: true;
    };

/** The strategy that applies: the VMI's own, else the cluster's (`--eviction-strategy`). */
export const evictionStrategyOf = (vmi: VirtualMachineInstance, cluster: EvictionStrategy): EvictionStrategy =>
  vmi.spec.evictionStrategy ?? cluster;

/** Why the VMI cannot live-migrate, or undefined when its LiveMigratable condition is True. */
function notMigratable(vmi: VirtualMachineInstance): string | undefined {
  const c = findCondition(vmi.status?.conditions, LIVE_MIGRATABLE);
  if (c?.status === 'True') return undefined;
  if (!c) return 'its node has not reported the LiveMigratable condition yet';
  return `${c.reason ?? 'NotMigratable'}: ${c.message ?? ''}`.trim();
}

export function evictionDecision(vmi: VirtualMachineInstance | undefined, pod: V1Pod, cluster: EvictionStrategy): EvictionDecision {
  if (pod.metadata?.labels?.[LAUNCHER_APP_LABEL] !== LAUNCHER_APP) return { allowed: true, why: 'not a launcher pod' };
  if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return { allowed: true, why: 'the pod has ended' };
  if (!vmi) return { allowed: true, why: 'its VMI is gone' };
  const id = `${vmi.metadata.namespace ?? 'default'}/${vmi.metadata.name}`;
  // The target pod of a migration in flight: evicting it would only fail the migration the drain waits for.
  if (isMigrationTarget(pod) && pod.spec?.nodeName !== vmi.status?.nodeName)
    return { allowed: false, message: 'Eviction request for target Pod' };
  const strategy = evictionStrategyOf(vmi, cluster);
  const node = pod.spec?.nodeName;
  const evacuate = {
    allowed: false as const,
    message: `Eviction triggered evacuation of VMI "${id}"`,
    ...(node ? { evacuateFrom: node } : {}),
  };
  switch (strategy) {
    case 'None':
      return { allowed: true, why: 'evictionStrategy None' };
    case 'External':
      return evacuate;
    case 'LiveMigrate': {
      const why = notMigratable(vmi);
      if (why)
        return {
          allowed: false,
          message: `VMI ${id} has evictionStrategy LiveMigrate but is not live-migratable: ${why}`,
          blocked: true,
        };
      return evacuate;
    }
    case 'LiveMigrateIfPossible':
      return notMigratable(vmi) ? { allowed: true, why: 'evictionStrategy LiveMigrateIfPossible and not live-migratable' } : evacuate;
  }
}

// KubeVirt's back-off between evacuation migrations of one VMI
// (watch/migration/migration.go, handleMigrationBackoff): the newest
// evacuation migration waits 20 s after the one before it failed, doubling
// for each further failure since the last success. Deleted ones (an uncordon
// canceled them) do not count. The migration controller holds a Pending
// evacuation migration until its back-off is over. Pure.
import type { VirtualMachineInstanceMigration } from '../../kubevirt/types.js';

/** On an evacuation VMIM: the node it moves the VMI away from (KubeVirt's annotation). */
export const EVACUATION_ANNOTATION = 'kubevirt.io/evacuationMigration';
export const EVACUATION_BACKOFF_MS = 20_000;

export const isEvacuation = (m: VirtualMachineInstanceMigration): boolean => Boolean(m.metadata.annotations?.[EVACUATION_ANNOTATION]);

const createdMs = (m: VirtualMachineInstanceMigration) => new Date(m.metadata.creationTimestamp ?? 0).getTime();

/** When a migration failed: its Failed transition, else its creation. */
function failedMs(m: VirtualMachineInstanceMigration): number {
  const at = m.status?.phaseTransitionTimestamps?.find((t) => t.phase === 'Failed')?.phaseTransitionTimestamp;
  return at ? new Date(at).getTime() : createdMs(m);
}

/** Milliseconds `migration` must still wait; 0 when it may go. `all`: every VMIM. */
export function evacuationBackoffMs(
  migration: VirtualMachineInstanceMigration,
  all: readonly VirtualMachineInstanceMigration[],
  now: Date,
): number {
  if (!isEvacuation(migration)) return 0;
  const newestFirst = all
    .filter(
      (m) =>
        isEvacuation(m) &&
        m.metadata.namespace === migration.metadata.namespace &&
        m.spec.vmiName === migration.spec.vmiName &&
        !m.metadata.deletionTimestamp,
    )
    .sort((a, b) => createdMs(b) - createdMs(a) || (b.metadata.name ?? '').localeCompare(a.metadata.name ?? ''));
  if (newestFirst[0]?.metadata.uid !== migration.metadata.uid) return 0;
  let backoffMs = 0;
  for (const m of newestFirst.slice(1)) {
    if (m.status?.phase === 'Succeeded') break;
    if (m.status?.phase === 'Failed') backoffMs = backoffMs === 0 ? EVACUATION_BACKOFF_MS : backoffMs * 2;
  }
  if (backoffMs === 0) return 0;
  return Math.max(0, failedMs(newestFirst[1]!) + backoffMs - now.getTime());
}

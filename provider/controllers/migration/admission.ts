// Whether a migration of a VMI may start, as KubeVirt's migration admission
// decides it (admitters/migration-create-admitter.go), in its words: the VMI
// must exist and not be final, must not be LiveMigratable=False, and must
// have no other unfinished migration. The subresource API checks this before
// it creates a VMIM; the migration controller checks it again before it
// accepts one (a VMIM created directly has no webhook in front of it). Pure.
import { findCondition } from '../../kubevirt/conditions.js';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';

export const LIVE_MIGRATABLE = 'LiveMigratable';
/** The VMIM's label naming its VMI: `virtctl migrate-cancel` lists by it. */
export const VMIM_VMI_LABEL = 'kubevirt.io/vmi-name';

/** A VMIM not yet Succeeded or Failed (a new one has no phase). */
export const isUnfinished = (m: VirtualMachineInstanceMigration): boolean =>
  m.status?.phase !== 'Succeeded' && m.status?.phase !== 'Failed';

/**
 * Why a migration of `vmiName` in `namespace` is refused, or undefined when it
 * may go ahead. `migrations` are the namespace's VMIMs; `self` is the uid of
 * the VMIM being admitted, which does not count against itself, and of two
 * unfinished ones the older (then the lower name) goes ahead.
 */
export function migrationRefusal(
  namespace: string,
  vmiName: string,
  vmi: VirtualMachineInstance | undefined,
  migrations: readonly VirtualMachineInstanceMigration[],
  self?: VirtualMachineInstanceMigration,
): string | undefined {
  if (!vmi) return `the VMI "${namespace}/${vmiName}" does not exist`;
  const phase = vmi.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return 'Cannot migrate VMI in finalized state.';
  const migratable = findCondition(vmi.status?.conditions, LIVE_MIGRATABLE);
  if (migratable?.status === 'False') return `Cannot migrate VMI, Reason: ${migratable.reason ?? ''}, Message: ${migratable.message ?? ''}`;
  const before = (a: VirtualMachineInstanceMigration, b: VirtualMachineInstanceMigration) => {
    const ta = new Date(a.metadata.creationTimestamp ?? 0).getTime();
    const tb = new Date(b.metadata.creationTimestamp ?? 0).getTime();
    return ta !== tb ? ta < tb : (a.metadata.name ?? '') < (b.metadata.name ?? '');
  };
  const inFlight = migrations.find(
    (m) =>
      m.spec.vmiName === vmiName &&
      m.metadata.uid !== self?.metadata.uid &&
      isUnfinished(m) &&
      // A new VMIM of the controller's own is admitted before any later one: a later one never blocks it.
      (!self || m.status?.phase || before(m, self)),
  );
  if (inFlight)
    return `in-flight migration detected. Active migration job (${inFlight.metadata.uid ?? inFlight.metadata.name}) is currently already in progress for VMI ${vmiName}.`;
  return undefined;
}

// The node's report on a live migration, as its launcher pod's condition
// (docs/design/live-migration.md §2): `vkvm.io/MigrationSource` on the
// source pod, `vkvm.io/MigrationTarget` on the target pod, the message
// prefixed `<migrationUid>:` so the controllers ignore one left from an
// earlier migration. Read from the launcher's own migration state (live, or
// its last word once it exited), so an agent restarted mid-way reports what
// happened. Pure; the status writer puts it into the pod status.
import type { MigrationState, VmState } from '../../launcher/agent-api.js';
import type { LauncherView } from '../launchers/registry.js';
import { SOURCE_CONDITION, TARGET_CONDITION, type SourceReport, type TargetReport } from '../controllers/migration/evidence.js';

export interface MigrationReport {
  type: typeof SOURCE_CONDITION | typeof TARGET_CONDITION;
  reason: SourceReport | TargetReport;
  message: string;
}

const SOURCE: Partial<Record<MigrationState['phase'], SourceReport>> = {
  Running: 'Started',
  Migrated: 'Migrated',
  Failed: 'Failed',
  Aborted: 'Aborted',
};

const TARGET: Partial<Record<MigrationState['phase'], TargetReport>> = {
  Prepared: 'Ready',
  ReceivedPaused: 'Ready',
  Resumed: 'Running',
  Failed: 'Failed',
};

/** The report for `state`; `exited` when its launcher is gone (a target that is gone before resuming has failed). */
export function migrationReport(state: MigrationState | undefined, exited: boolean): MigrationReport | undefined {
  if (!state) return undefined;
  const say = (text: string) => `${state.uid}: ${text}`;
  if (state.role === 'Source') {
    const reason = SOURCE[state.phase];
    if (!reason) return undefined;
    const detail = [state.reason, state.message].filter(Boolean).join(': ');
    return { type: SOURCE_CONDITION, reason, message: say(detail || `the source ${reason.toLowerCase()}`) };
  }
  let reason = TARGET[state.phase];
  let detail = [state.reason, state.message].filter(Boolean).join(': ');
  if (exited && state.phase !== 'Resumed' && state.phase !== 'Failed') {
    reason = 'Failed';
    detail = 'the target launcher exited before the VM resumed here';
  }
  if (!reason) return undefined;
  return { type: TARGET_CONDITION, reason, message: say(detail || `the target is ${reason.toLowerCase()}`) };
}

/**
 * The launcher's migration state, read with its VM's: a source launcher may
 * publish its VM's end (Succeeded, Migrated) a moment before its migration's
 * Migrated, and that VM state is the commit as surely.
 */
export function migrationOf(vm: Pick<VmState, 'phase' | 'reason' | 'migration'> | undefined): MigrationState | undefined {
  const m = vm?.migration;
  if (m?.role === 'Source' && m.phase === 'Running' && vm?.phase === 'Succeeded' && vm.reason === 'Migrated')
    return { ...m, phase: 'Migrated' };
  return m;
}

/** The report of a pod's launcher, live or gone. */
export function launcherMigrationReport(view: LauncherView<unknown> | undefined): MigrationReport | undefined {
  if (!view) return undefined;
  return view.live ? migrationReport(migrationOf(view.state), false) : migrationReport(migrationOf(view.lastState), true);
}

// The Migration union (phases.ts) as the VMIM's status, and back: phase,
// phaseTransitionTimestamps, the AbortRequested condition, and
// `migrationState`, which the VMI's status carries a copy of from the
// handoff on. The VMIM status is the union's only store, so a restarted
// controller resumes from it. Pure.
import { setCondition } from '../../kubevirt/conditions.js';
import type {
  MigrationConfiguration,
  MigrationPhase,
  MigrationState,
  VirtualMachineInstanceMigrationStatus,
} from '../../kubevirt/types.js';
import type { Ends, FailureReason, Migration } from './phases.js';

/** Fixed when the migration is accepted: which policy applies and the settings it gives. */
export interface Settings {
  policyName?: string;
  configuration: MigrationConfiguration;
}

const endsOf = (s: MigrationState | undefined): Ends | undefined =>
  s?.sourceNode && s.sourcePod && s.targetNode && s.targetPod
    ? { sourceNode: s.sourceNode, sourcePod: s.sourcePod, targetNode: s.targetNode, targetPod: s.targetPod }
    : undefined;

const REASONS: ReadonlySet<string> = new Set<FailureReason>([
  'Rejected',
  'VMIGone',
  'Canceled',
  'TargetUnschedulable',
  'TargetFailed',
  'SourceFailed',
  'Aborted',
]);

/** The migration a VMIM's status records; a status this controller did not write reads as far as it can. */
export function migrationOf(status: VirtualMachineInstanceMigrationStatus | undefined): Migration {
  const s = status?.migrationState;
  const ends = endsOf(s);
  const phase = status?.phase ?? '';
  const address = s?.targetNodeAddress ?? '';
  const abortRequested = s?.abortRequested === true;
  switch (phase) {
    case '':
      return { phase: 'New' };
    case 'Pending':
    case 'Scheduling':
    case 'Scheduled':
      return { phase };
    case 'Failed': {
      const [head, ...rest] = (s?.failureReason ?? '').split(': ');
      const known = head !== undefined && REASONS.has(head);
      return {
        phase: 'Failed',
        reason: known ? (head as FailureReason) : 'SourceFailed',
        message: known ? rest.join(': ') : (s?.failureReason ?? ''),
        ...(ends ? { ends } : {}),
        ...(s?.abortStatus === 'Succeeded' ? { abortStatus: 'Succeeded' as const } : {}),
      };
    }
  }
  if (!ends) return { phase: 'Failed', reason: 'TargetFailed', message: `status ${phase} without the migration's ends` };
  switch (phase) {
    case 'PreparingTarget':
      return { phase, ends };
    case 'TargetReady':
      return { phase, ends, address, abortRequested };
    case 'Running':
      return {
        phase,
        ends,
        address,
        startedAt: s?.startTimestamp ?? new Date(0).toISOString(),
        abortRequested,
        ...(s?.endTimestamp ? { committedAt: s.endTimestamp } : {}),
      };
    case 'Succeeded':
      return {
        phase,
        ends,
        address,
        ...(s?.startTimestamp ? { startedAt: s.startTimestamp } : {}),
        endedAt: s?.endTimestamp ?? new Date(0).toISOString(),
        ...(s?.abortStatus === 'Failed' ? { abortStatus: 'Failed' as const } : {}),
      };
  }
  return { phase: 'Failed', reason: 'TargetFailed', message: `unknown phase ${phase}` };
}

/** The migrationState of `m`; undefined while nothing is recorded yet (before the handoff, unless it failed). */
export function migrationStateOf(m: Migration, uid: string, settings: Settings | undefined): MigrationState | undefined {
  if (m.phase === 'New' || m.phase === 'Pending' || m.phase === 'Scheduling' || m.phase === 'Scheduled') return undefined;
  const base: MigrationState = {
    migrationUid: uid,
    ...('ends' in m && m.ends ? m.ends : {}),
    ...(settings?.policyName ? { migrationPolicyName: settings.policyName } : {}),
    ...(settings ? { migrationConfiguration: settings.configuration } : {}),
  };
  switch (m.phase) {
    case 'PreparingTarget':
      return base;
    case 'TargetReady':
      return { ...base, targetNodeAddress: m.address, ...(m.abortRequested ? { abortRequested: true } : {}) };
    case 'Running':
      return {
        ...base,
        targetNodeAddress: m.address,
        startTimestamp: m.startedAt,
        mode: 'PreCopy',
        ...(m.committedAt ? { endTimestamp: m.committedAt } : {}),
        ...(m.abortRequested ? { abortRequested: true } : {}),
      };
    case 'Succeeded':
      return {
        ...base,
        targetNodeAddress: m.address,
        ...(m.startedAt ? { startTimestamp: m.startedAt } : {}),
        endTimestamp: m.endedAt,
        mode: 'PreCopy',
        completed: true,
        ...(m.abortStatus ? { abortRequested: true, abortStatus: m.abortStatus } : {}),
      };
    case 'Failed':
      return {
        ...base,
        failed: true,
        failureReason: `${m.reason}: ${m.message}`,
        ...(m.abortStatus ? { abortRequested: true, abortStatus: m.abortStatus } : {}),
      };
  }
}

/** The VMIM's status for `m`, keeping the earlier transitions and conditions. */
export function vmimStatusOf(
  m: Migration,
  previous: VirtualMachineInstanceMigrationStatus | undefined,
  uid: string,
  settings: Settings | undefined,
  now: Date,
): VirtualMachineInstanceMigrationStatus {
  const phase: MigrationPhase = m.phase === 'New' ? '' : m.phase;
  const transitions = previous?.phaseTransitionTimestamps ?? [];
  const moved = phase !== '' && (previous?.phase ?? '') !== phase;
  const abortRequested = 'abortRequested' in m ? m.abortRequested : m.phase !== 'New' && 'abortStatus' in m && Boolean(m.abortStatus);
  let conditions = previous?.conditions;
  if (abortRequested)
    conditions = setCondition(
      conditions,
      { type: 'AbortRequested', status: 'True', reason: 'AbortRequested', message: 'Migration abort requested' },
      now,
    );
  const state = migrationStateOf(m, uid, settings);
  return {
    phase,
    phaseTransitionTimestamps: moved ? [...transitions, { phase, phaseTransitionTimestamp: now.toISOString() }] : transitions,
    ...(conditions?.length ? { conditions } : {}),
    ...(state ? { migrationState: state } : {}),
  };
}

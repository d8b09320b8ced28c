// A live migration's cluster-side lifecycle: a tagged union and the one
// transition table that moves it (docs/design/live-migration.md §2). The
// migration controller reads the VMIM, the VMI, both launcher pods (with the
// agents' reports) and the target Node into `Observed`, calls nextMigration,
// writes the result and carries out the actions. Pure: the caller passes the
// time, and re-syncs after `recheckAfterMs` when a decision waits on a clock.
//
// `Migrated` from the source is the point of no return: every failure before
// it leaves the VM on the source; after it the VM lives on the target only.
import type { Evidence, NodeView, SourceReport, TargetPodView, TargetReport } from './evidence.js';

/** KubeVirt deletes a target pod the scheduler could not place for this long (and fails the migration). */
export const UNSCHEDULABLE_TIMEOUT_MS = 300_000;
/** KubeVirt's catch-all: a target pod that has not started after this long fails the migration. */
export const PENDING_TIMEOUT_MS = 900_000;
/** How soon a Pending migration looks again for a free slot. */
export const SLOT_RECHECK_MS = 5_000;

export type FailureReason = 'Rejected' | 'VMIGone' | 'Canceled' | 'TargetUnschedulable' | 'TargetFailed' | 'SourceFailed' | 'Aborted';

/** The two launcher pods and their nodes, fixed at the handoff. */
export interface Ends {
  sourceNode: string;
  sourcePod: string;
  targetNode: string;
  targetPod: string;
}

export type Migration =
  | { phase: 'New' }
  | { phase: 'Pending' }
  | { phase: 'Scheduling' }
  | { phase: 'Scheduled' }
  | { phase: 'PreparingTarget'; ends: Ends }
  | { phase: 'TargetReady'; ends: Ends; address: string; abortRequested: boolean }
  | { phase: 'Running'; ends: Ends; address: string; startedAt: string; abortRequested: boolean; committedAt?: string }
  | { phase: 'Succeeded'; ends: Ends; address: string; startedAt?: string; endedAt: string; abortStatus?: 'Failed'; vmiLost?: boolean }
  | {
      phase: 'Failed';
      reason: FailureReason;
      message: string;
      /** Present when the VMI was handed off (its migrationState copy then records the failure). */
      ends?: Ends;
      abortStatus?: 'Succeeded';
    };

export type Phase = Migration['phase'];
export const FINAL_PHASES: ReadonlySet<Phase> = new Set(['Succeeded', 'Failed']);
export const isFinal = (m: Migration): boolean => FINAL_PHASES.has(m.phase);

export interface Observed {
  now: Date;
  /** The VMIM is being deleted: cancel, or abort once the source may have started. */
  deleting: boolean;
  /** Why admission refuses this migration (admission.ts); read only before Pending. */
  refusal?: string;
  /** The VMI, if it exists. */
  vmi?: { final: boolean; deleting: boolean };
  /** The VMI's own launcher pod on its node. */
  sourcePod?: { name: string; node: string };
  /** The target pod; absent when the API server has none. */
  targetPod?: TargetPodView;
  /** The target pod's node. */
  targetNode?: NodeView;
  /** A migration slot is free (slots.ts). */
  slotsFree: boolean;
  source?: Evidence<SourceReport>;
  target?: Evidence<TargetReport>;
}

export type Action =
  /** Finalizer kubevirt.io/migrationJobFinalize and label kubevirt.io/vmi-name on the VMIM. */
  | { kind: 'adopt' }
  | { kind: 'createTargetPod' }
  | { kind: 'deleteTargetPod' }
  /** Let the target node read the VMI (node-vmi-grant.ts). */
  | { kind: 'grantTargetNode'; node: string }
  /** After the switch-over: the VMI runs on the target node; `lost` when that node died with it. */
  | { kind: 'moveVmi'; node: string; lost: boolean }
  | { kind: 'event'; type: 'Normal' | 'Warning'; reason: string; message: string }
  /** Final: drop the finalizer so a deleted VMIM goes. */
  | { kind: 'releaseFinalizer' };

export interface Decision {
  next: Migration;
  actions: Action[];
  recheckAfterMs?: number;
}

const stay = (m: Migration, actions: Action[] = [], recheckAfterMs?: number): Decision => ({
  next: m,
  actions,
  ...(recheckAfterMs !== undefined ? { recheckAfterMs } : {}),
});

function fail(reason: FailureReason, message: string, from: Migration, extra: { abortStatus?: 'Succeeded' } = {}): Decision {
  const ends = 'ends' in from ? from.ends : undefined;
  const next: Migration = { phase: 'Failed', reason, message, ...(ends ? { ends } : {}), ...extra };
  const type = reason === 'Canceled' ? 'Normal' : 'Warning';
  return {
    next,
    actions: [
      ...(reason === 'Rejected' ? [] : [{ kind: 'deleteTargetPod' } as const]),
      { kind: 'event', type, reason: reason === 'Canceled' ? 'MigrationCanceled' : 'FailedMigration', message },
    ],
  };
}

const ms = (iso: string) => new Date(iso).getTime();

/** The target pod's failure before the switch-over, if any. */
function targetFailure(o: Observed): string | undefined {
  const pod = o.targetPod;
  if (!pod) return 'the target pod is gone';
  if (pod.deleting) return `the target pod ${pod.name} is being deleted`;
  if (pod.phase === 'Failed' || pod.phase === 'Succeeded') return `the target pod ${pod.name} ended (${pod.phase})`;
  if (o.target?.reason === 'Failed') return `the target node failed: ${o.target.message}`;
  return undefined;
}

/** Scheduling and Scheduled: the time limits of a target pod that never starts. */
function targetLate(o: Observed): Decision['recheckAfterMs'] | { reason: FailureReason; message: string } {
  const pod = o.targetPod!;
  const now = o.now.getTime();
  if (pod.unschedulableSince && !pod.node) {
    const left = ms(pod.unschedulableSince) + UNSCHEDULABLE_TIMEOUT_MS - now;
    if (left <= 0)
      return {
        reason: 'TargetUnschedulable',
        message: `no node could take the target pod ${pod.name} for ${UNSCHEDULABLE_TIMEOUT_MS / 1000} s: ${pod.unschedulableMessage ?? 'unschedulable'}`,
      };
  }
  const left = ms(pod.createdAt) + PENDING_TIMEOUT_MS - now;
  if (left <= 0)
    return { reason: 'TargetUnschedulable', message: `the target pod ${pod.name} did not start within ${PENDING_TIMEOUT_MS / 1000} s` };
  const unschedLeft = pod.unschedulableSince && !pod.node ? ms(pod.unschedulableSince) + UNSCHEDULABLE_TIMEOUT_MS - now : Infinity;
  return Math.min(left, unschedLeft);
}

/** The migration's next state and what the controller does to get there; the first row that applies wins. */
export function nextMigration(m: Migration, o: Observed): Decision {
  if (m.phase === 'Succeeded' || m.phase === 'Failed') return stay(m, [{ kind: 'releaseFinalizer' }]);

  if (m.phase === 'New') {
    if (o.refusal) return fail('Rejected', o.refusal, m);
    return { next: { phase: 'Pending' }, actions: [{ kind: 'adopt' }] };
  }

  const committed = m.phase === 'Running' && m.committedAt !== undefined;
  if (!committed && (!o.vmi || o.vmi.final || o.vmi.deleting))
    return fail('VMIGone', o.vmi ? 'the VMI ended or is being deleted' : 'the VMI is gone', m);

  // Before the source can have started, deleting the VMIM cancels it outright.
  const beforeSource = m.phase === 'Pending' || m.phase === 'Scheduling' || m.phase === 'Scheduled' || m.phase === 'PreparingTarget';
  if (o.deleting && beforeSource) return fail('Canceled', 'the migration was deleted before it started', m, { abortStatus: 'Succeeded' });

  switch (m.phase) {
    case 'Pending':
      if (!o.slotsFree) return stay(m, [], SLOT_RECHECK_MS);
      return { next: { phase: 'Scheduling' }, actions: [{ kind: 'createTargetPod' }] };

    case 'Scheduling': {
      const failure = targetFailure(o);
      if (failure) return fail('TargetFailed', failure, m);
      const pod = o.targetPod!;
      if (pod.node) return { next: { phase: 'Scheduled' }, actions: [{ kind: 'grantTargetNode', node: pod.node }] };
      const late = targetLate(o);
      if (typeof late === 'object') return fail(late.reason, late.message, m);
      return stay(m, [], late);
    }

    case 'Scheduled': {
      const failure = targetFailure(o);
      if (failure) return fail('TargetFailed', failure, m);
      const pod = o.targetPod!;
      // Idempotent: the grant survives a controller restart between the two phases.
      const grant: Action = { kind: 'grantTargetNode', node: pod.node! };
      if (pod.phase === 'Running' && o.sourcePod) {
        const ends = { sourceNode: o.sourcePod.node, sourcePod: o.sourcePod.name, targetNode: pod.node!, targetPod: pod.name };
        return { next: { phase: 'PreparingTarget', ends }, actions: [grant] };
      }
      const late = targetLate(o);
      if (typeof late === 'object') return fail(late.reason, late.message, m);
      return stay(m, [grant], late);
    }

    case 'PreparingTarget': {
      const failure = targetFailure(o);
      if (failure) return fail('TargetFailed', failure, m);
      if (o.target?.reason === 'Ready' || o.target?.reason === 'Running') {
        if (!o.targetNode?.address) return stay(m);
        return { next: { phase: 'TargetReady', ends: m.ends, address: o.targetNode.address, abortRequested: false }, actions: [] };
      }
      return stay(m);
    }

    case 'TargetReady': {
      if (o.source?.reason === 'Failed' || o.source?.reason === 'Aborted') return sourceEnded(m, o.source);
      const failure = targetFailure(o);
      if (failure) return fail('TargetFailed', failure, m);
      if (o.source?.reason === 'Started' || o.source?.reason === 'Migrated')
        return running({ ...m, phase: 'Running', startedAt: o.source.at }, o);
      if (o.deleting && !m.abortRequested) return stay({ ...m, abortRequested: true }, [abortEvent]);
      return stay(m);
    }

    case 'Running':
      return running(m, o);
  }
}

const abortEvent: Action = { kind: 'event', type: 'Normal', reason: 'AbortRequested', message: 'the migration was deleted; aborting it' };

function sourceEnded(m: Extract<Migration, { phase: 'TargetReady' | 'Running' }>, source: Evidence<SourceReport>): Decision {
  const reason: FailureReason = source.reason === 'Aborted' ? 'Aborted' : 'SourceFailed';
  return fail(reason, source.message || `the source reported ${source.reason}`, m, m.abortRequested ? { abortStatus: 'Succeeded' } : {});
}

function running(m: Extract<Migration, { phase: 'Running' }>, o: Observed): Decision {
  const migrated = o.source?.reason === 'Migrated' ? o.source : undefined;
  if (!migrated) {
    if (o.source?.reason === 'Failed' || o.source?.reason === 'Aborted') return sourceEnded(m, o.source);
    // Before the commit, a lost target is aborted on the source; the source then reports Aborted.
    const targetLost = !o.targetPod || o.targetPod.deleting || o.target?.reason === 'Failed' || o.targetNode?.ready === false;
    if ((o.deleting || targetLost) && !m.abortRequested) return stay({ ...m, abortRequested: true }, o.deleting ? [abortEvent] : []);
    return stay(m);
  }
  const ended = { ends: m.ends, address: m.address, startedAt: m.startedAt, endedAt: migrated.at };
  const abortStatus = m.abortRequested ? { abortStatus: 'Failed' as const } : {};
  if (o.target?.reason === 'Running') {
    return {
      next: { phase: 'Succeeded', ...ended, ...abortStatus },
      actions: [
        { kind: 'moveVmi', node: m.ends.targetNode, lost: false },
        {
          kind: 'event',
          type: 'Normal',
          reason: 'SuccessfulMigration',
          message: `migrated from ${m.ends.sourceNode} to ${m.ends.targetNode}`,
        },
      ],
    };
  }
  const targetGone = !o.targetPod || o.targetPod.phase === 'Failed' || o.target?.reason === 'Failed' || o.targetNode?.ready === false;
  if (targetGone) {
    return {
      next: { phase: 'Succeeded', ...ended, ...abortStatus, vmiLost: true },
      actions: [
        { kind: 'moveVmi', node: m.ends.targetNode, lost: true },
        {
          kind: 'event',
          type: 'Warning',
          reason: 'NodeLost',
          message: `the VM left ${m.ends.sourceNode}, but its target ${m.ends.targetNode} failed after the switch-over`,
        },
      ],
    };
  }
  // Committed, the target not yet resumed: the VMI copy's endTimestamp is the target's signal to resume.
  if (m.committedAt === undefined) return stay({ ...m, committedAt: migrated.at });
  return stay(m);
}

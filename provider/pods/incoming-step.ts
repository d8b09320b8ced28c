// What one sync of a live migration's target pod does next (pod-migrations.ts
// acts on it), and when that pod is looked at again. Level-triggered: the
// step follows from the launcher's state and the VMI's migration state as
// read now, so a sync that missed an event (the VMI's watch refused or late,
// the control stream's commit lost) does the same as one that saw it; and
// a pod still receiving is synced again every INCOMING_RECHECK_MS, so no
// lost event can strand a committed migration with its VM paused.
import type { VirtualMachineInstance } from '../kubevirt/types.js';

/** The target launcher as the pod's sync sees it. */
export type IncomingLauncher = 'none' | 'gone' | 'waiting' | 'resumed';

export type IncomingStep =
  /** The launcher is gone before the VM arrived: this target can never receive it. */
  | { kind: 'end' }
  /** The VM runs here: from now on the pod is the VMI's pod like any. */
  | { kind: 'arrived' }
  /** No launcher waits for the VM yet (or this agent has not prepared it since it started). */
  | { kind: 'prepare' }
  /** The source committed (the VMI's endTimestamp for this migration and pod): resume the VM here. */
  | { kind: 'resume' }
  /** Prepared; the source has not committed. */
  | { kind: 'wait' };

/** How often a receiving pod is synced again whatever its events: the bound on a lost commit's delay. */
export const INCOMING_RECHECK_MS = 3_000;

type MigrationStateCopy = NonNullable<NonNullable<VirtualMachineInstance['status']>['migrationState']>;

/** The controllers copied the source's commit into the VMI for this migration and this target pod, and it did not fail. */
export function committedTo(state: MigrationStateCopy | undefined, job: string, podName: string | undefined): boolean {
  return state?.migrationUid === job && state.targetPod === podName && !!state.endTimestamp && !state.failed;
}

/** The first that applies. */
export function nextIncomingStep(i: { launcher: IncomingLauncher; prepared: boolean; committed: boolean }): IncomingStep {
  if (i.launcher === 'gone') return { kind: 'end' };
  if (i.launcher === 'resumed') return { kind: 'arrived' };
  if (i.launcher === 'none' || !i.prepared) return { kind: 'prepare' };
  return { kind: i.committed ? 'resume' : 'wait' };
}

/** When the pod syncs again after this step, whatever happens meanwhile; undefined once it is no longer receiving. */
export function incomingRecheckMs(step: IncomingStep): number | undefined {
  return step.kind === 'end' || step.kind === 'arrived' ? undefined : INCOMING_RECHECK_MS;
}

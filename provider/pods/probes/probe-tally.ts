// A probe's result over its runs, by the kubelet's rule (prober/worker.go):
// a result counts only once it has repeated its threshold times in a row
// (successThreshold for a success, failureThreshold for a failure); until
// then the previous result stands. Readiness starts failed: not Ready until
// a probe passes.

export type ProbeResult = 'success' | 'failure';

export interface ProbeTally {
  /** The result in force. */
  result: ProbeResult;
  /** The last run's outcome and how many runs in a row had it. */
  last?: ProbeResult;
  run: number;
  /** Why the last run failed. */
  message?: string;
}

export const INITIAL_READINESS: ProbeTally = { result: 'failure', run: 0 };

/** The tally after one run. Pure. */
export function tally(
  t: ProbeTally,
  outcome: { ok: boolean; message?: string },
  thresholds: { successThreshold: number; failureThreshold: number },
): ProbeTally {
  const now: ProbeResult = outcome.ok ? 'success' : 'failure';
  const run = now === t.last ? t.run + 1 : 1;
  const needed = now === 'success' ? thresholds.successThreshold : thresholds.failureThreshold;
  return {
    result: run >= needed ? now : t.result,
    last: now,
    run,
    ...(outcome.ok || outcome.message === undefined ? {} : { message: outcome.message }),
  };
}

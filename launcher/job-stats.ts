// An outgoing migration's progress, as libvirt reports it (`virsh domjobinfo
// --rawstats`), and the source monitor's verdict on it: KubeVirt's progress
// timeout (no new low of data_remaining for too long) and completion timeout
// (the whole job too long: pause the guest when allowed, else abort). Pure;
// the clock is the caller's.

/** Figures of libvirt's job, the fields of launcher.proto's JobStats. */
export interface JobStats {
  timeElapsedMs: number;
  dataTotal: number;
  dataProcessed: number;
  dataRemaining: number;
  memoryDirtyRate: number;
  iteration: number;
  /** Expected downtime while running; the measured one for a completed job. */
  downtimeMs: number;
}

const FIELDS: Record<keyof JobStats, string> = {
  timeElapsedMs: 'time_elapsed',
  dataTotal: 'data_total',
  dataProcessed: 'data_processed',
  dataRemaining: 'data_remaining',
  memoryDirtyRate: 'memory_dirty_rate',
  iteration: 'memory_iteration',
  downtimeMs: 'downtime',
};

/** `virsh domjobinfo --rawstats` output as JobStats; undefined when no job runs ("Job type: 0"). Absent figures are 0. */
export function parseJobStats(text: string): JobStats | undefined {
  const raw = new Map<string, number>();
  for (const m of text.matchAll(/^\s*([A-Za-z_ ]+):\s+(\d+)\s*$/gm)) raw.set(m[1]!.trim(), Number(m[2]));
  const type = raw.get('Job type');
  if (type === undefined || type === 0) return undefined;
  return Object.fromEntries(Object.entries(FIELDS).map(([k, f]) => [k, raw.get(f) ?? 0])) as unknown as JobStats;
}

export interface MonitorLimits {
  /** Abort when data_remaining sets no new low for this long; 0: never. */
  progressTimeoutS: number;
  /** The whole job's limit; 0: none. */
  completionTimeoutS: number;
  /** At the completion limit, pause the guest (and allow as long again) instead of aborting. */
  allowWorkloadDisruption: boolean;
}

export interface MonitorState {
  startedAtMs: number;
  lowestRemaining: number;
  lowestAtMs: number;
  /** Set once the guest was paused to let the copy converge. */
  pausedAtMs?: number;
}

export type MonitorVerdict =
  | { action: 'continue' }
  | { action: 'pause'; message: string }
  | { action: 'abort'; reason: 'MigrationProgressTimeout' | 'MigrationCompletionTimeout'; message: string };

export const startMonitor = (nowMs: number): MonitorState => ({ startedAtMs: nowMs, lowestRemaining: Infinity, lowestAtMs: nowMs });

/** The next state and what to do, given the latest figures (undefined: libvirt reports no job yet) at `nowMs`. */
export function judgeProgress(
  s: MonitorState,
  stats: JobStats | undefined,
  nowMs: number,
  limits: MonitorLimits,
): { state: MonitorState; verdict: MonitorVerdict } {
  let state = s;
  if (stats && stats.dataRemaining < s.lowestRemaining) state = { ...s, lowestRemaining: stats.dataRemaining, lowestAtMs: nowMs };
  const stalledMs = nowMs - state.lowestAtMs;
  if (limits.progressTimeoutS > 0 && stalledMs > limits.progressTimeoutS * 1000) {
    const message = `no progress for ${Math.round(stalledMs / 1000)} s (data remaining ${state.lowestRemaining} bytes at best)`;
    return { state, verdict: { action: 'abort', reason: 'MigrationProgressTimeout', message } };
  }
  const elapsedMs = nowMs - state.startedAtMs;
  const limitMs = limits.completionTimeoutS * 1000;
  if (limitMs > 0 && elapsedMs > limitMs) {
    if (limits.allowWorkloadDisruption && state.pausedAtMs === undefined) {
      const message = `not done after ${limits.completionTimeoutS} s: pausing the guest so the copy converges`;
      return { state: { ...state, pausedAtMs: nowMs }, verdict: { action: 'pause', message } };
    }
    if (!limits.allowWorkloadDisruption || elapsedMs > 2 * limitMs) {
      const message = `not done after ${Math.round(elapsedMs / 1000)} s (limit ${limits.completionTimeoutS} s${limits.allowWorkloadDisruption ? ', doubled after pausing' : ''})`;
      return { state, verdict: { action: 'abort', reason: 'MigrationCompletionTimeout', message } };
    }
  }
  return { state, verdict: { action: 'continue' } };
}

// libvirt's job figures, and when the source monitor pauses or aborts (an injected clock: plain numbers).
import t from 'tap';
import { judgeProgress, parseJobStats, startMonitor, type JobStats, type MonitorLimits } from './job-stats.js';

// As virsh 9.0 printed them in spike 1 (a completed job).
const COMPLETED = `Job type: 3

operation: 5
time_elapsed: 3042
time_elapsed_net: 3037
downtime: 677
downtime_net: 672
setup_time: 14
data_total: 134815744
data_processed: 85138090
data_remaining: 0
memory_total: 134750208
memory_dirty_rate: 0
memory_iteration: 3
disk_total: 65536
`;

t.test('parseJobStats reads the raw figures; no job is undefined', async (t) => {
  t.same(
    [parseJobStats(COMPLETED), parseJobStats('Job type: 0\n\n'), parseJobStats(''), parseJobStats('Job type: 2\ndata_remaining: 5\n')],
    [
      {
        timeElapsedMs: 3042,
        dataTotal: 134815744,
        dataProcessed: 85138090,
        dataRemaining: 0,
        memoryDirtyRate: 0,
        iteration: 3,
        downtimeMs: 677,
      },
      undefined,
      undefined,
      { timeElapsedMs: 0, dataTotal: 0, dataProcessed: 0, dataRemaining: 5, memoryDirtyRate: 0, iteration: 0, downtimeMs: 0 },
    ],
  );
});

const remaining = (dataRemaining: number): JobStats => ({
  timeElapsedMs: 0,
  dataTotal: 0,
  dataProcessed: 0,
  dataRemaining,
  memoryDirtyRate: 0,
  iteration: 1,
  downtimeMs: 0,
});

/** Feeds (second, data_remaining) samples until an abort; returns the verdicts that were not "continue", with their second. */
function run(limits: MonitorLimits, samples: [number, number | undefined][]): string[] {
  let state = startMonitor(0);
  const out: string[] = [];
  for (const [s, r] of samples) {
    const next = judgeProgress(state, r === undefined ? undefined : remaining(r), s * 1000, limits);
    state = next.state;
    if (next.verdict.action !== 'continue') out.push(`${s}:${next.verdict.action}:${'reason' in next.verdict ? next.verdict.reason : ''}`);
    if (next.verdict.action === 'abort') break; // the monitor stops there
  }
  return out;
}

t.test('the progress timeout counts from the last new low of data_remaining', async (t) => {
  const limits = { progressTimeoutS: 10, completionTimeoutS: 0, allowWorkloadDisruption: false };
  t.same(
    run(limits, [
      [1, 100],
      [5, 90],
      [14, 95],
      [15, 95],
      [16, 95],
    ]),
    ['16:abort:MigrationProgressTimeout'],
    'no new low since 5 s',
  );
  t.same(
    run(limits, [
      [1, 100],
      [9, 80],
      [18, 70],
      [27, 60],
    ]),
    [],
    'each new low restarts it',
  );
  t.same(
    run(limits, [
      [5, undefined],
      [11, undefined],
    ]),
    ['11:abort:MigrationProgressTimeout'],
    'no job figures at all is no progress',
  );
  t.same(run({ ...limits, progressTimeoutS: 0 }, [[1000, 5]]), [], '0 turns it off');
});

t.test('the completion timeout aborts, or pauses once and aborts at twice the limit when disruption is allowed', async (t) => {
  const limits = { progressTimeoutS: 0, completionTimeoutS: 20, allowWorkloadDisruption: false };
  const falling = (until: number): [number, number][] => Array.from({ length: until }, (_, i) => [i + 1, 1000 - i]);
  t.same(run(limits, falling(25)), ['21:abort:MigrationCompletionTimeout']);
  t.same(run({ ...limits, allowWorkloadDisruption: true }, falling(45)), ['21:pause:', '41:abort:MigrationCompletionTimeout']);
});

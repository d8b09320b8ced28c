import t, { type Test } from 'tap';
import { readBootTime, readNodeUsage } from './usage.js';

const procRoot = (t: Test) =>
  t.testdir({
    stat: [
      'cpu  1000 50 300 90000 400 10 20 5 7 0',
      'cpu0 500 25 150 45000 200 5 10 2 3 0',
      'intr 12345',
      'btime 1767225600',
      'processes 999',
      '',
    ].join('\n'),
    meminfo: [
      'MemTotal:        8000000 kB',
      'MemFree:         5000000 kB',
      'MemAvailable:    6500000 kB',
      'Inactive(file):  1000000 kB',
      'AnonPages:        900000 kB',
      'HugePages_Total:       0',
      '',
    ].join('\n'),
  });

t.test('node usage: busy ticks in ns, working set = used − inactive file, available = total − working set', async (t) => {
  const now = new Date('2026-01-02T00:00:00Z');
  const kib = 1024;
  t.same(await readNodeUsage({ procRoot: procRoot(t), now: () => now }), {
    time: now,
    // user+nice+system+irq+softirq+steal = 1385 ticks of 10 ms
    cpuUsageCoreNanoSeconds: 13_850_000_000,
    memoryUsageBytes: 3_000_000 * kib,
    memoryWorkingSetBytes: 2_000_000 * kib,
    memoryRSSBytes: 900_000 * kib,
    memoryAvailableBytes: 6_000_000 * kib,
  });
});

t.test('boot time comes from btime', async (t) => {
  t.same(await readBootTime({ procRoot: procRoot(t) }), new Date('2026-01-01T00:00:00Z'));
});

t.test('the real /proc parses', async (t) => {
  const u = await readNodeUsage();
  t.ok(u.cpuUsageCoreNanoSeconds > 0 && u.memoryWorkingSetBytes > 0 && u.memoryAvailableBytes > 0, 'positive figures');
});

import t from 'tap';
import { CgroupNotFoundError, readVmUsage } from './usage.js';

const now = () => new Date('2026-01-01T00:00:00Z');
const MiB = 1024 * 1024;

t.test('v1: cpuacct, memory usage, total_inactive_file and total_rss, as cAdvisor reads them', async (t) => {
  const root = t.testdir({
    unified: { 'cgroup.controllers': '' },
    memory: {
      'cgroup.procs': '',
      vkvm: {
        u1: {
          'memory.usage_in_bytes': `${300 * MiB}\n`,
          'memory.limit_in_bytes': `${512 * MiB}\n`,
          'memory.stat': `cache ${10 * MiB}\nrss ${1 * MiB}\ntotal_cache ${120 * MiB}\ntotal_rss ${170 * MiB}\ntotal_inactive_file ${100 * MiB}\n`,
        },
      },
    },
    cpu: { 'cgroup.procs': '' },
    cpuacct: { 'cgroup.procs': '', vkvm: { u1: { 'cpuacct.usage': '2500000000\n' } } },
    pids: { 'cgroup.procs': '' },
  });
  t.same(
    await readVmUsage({ uid: 'u1', parent: 'vkvm', root, now }),
    {
      time: now(),
      cpuUsageCoreNanoSeconds: 2_500_000_000,
      memoryUsageBytes: 300 * MiB,
      memoryWorkingSetBytes: 200 * MiB,
      memoryRSSBytes: 170 * MiB,
      memoryLimitBytes: 512 * MiB,
    },
    'working set is usage minus inactive file pages; hierarchical (total_) figures are used',
  );
});

t.test('v1 with cpu,cpuacct co-mounted reads cpuacct.usage from the cpu hierarchy; no limit is absent', async (t) => {
  const root = t.testdir({
    memory: {
      'cgroup.procs': '',
      vkvm: {
        u1: {
          'memory.usage_in_bytes': '1000\n',
          'memory.limit_in_bytes': '9223372036854771712\n',
          'memory.stat': 'total_rss 400\ntotal_inactive_file 4000\n',
        },
      },
    },
    cpu: { 'cgroup.procs': '', vkvm: { u1: { 'cpuacct.usage': '7\n' } } },
    pids: { 'cgroup.procs': '' },
  });
  t.same(await readVmUsage({ uid: 'u1', parent: 'vkvm', root, now }), {
    time: now(),
    cpuUsageCoreNanoSeconds: 7,
    memoryUsageBytes: 1000,
    memoryWorkingSetBytes: 0,
    memoryRSSBytes: 400,
  });
});

t.test('v2: cpu.stat usage_usec, memory.current, inactive_file and anon', async (t) => {
  const root = t.testdir({
    'cgroup.controllers': 'cpuset cpu io memory pids\n',
    vkvm: {
      u1: {
        'cpu.stat': 'usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n',
        'memory.current': `${64 * MiB}\n`,
        'memory.max': 'max\n',
        'memory.stat': `anon ${40 * MiB}\nfile ${20 * MiB}\nactive_file ${5 * MiB}\ninactive_file ${15 * MiB}\n`,
      },
    },
  });
  t.same(await readVmUsage({ uid: 'u1', parent: 'vkvm', root, now }), {
    time: now(),
    cpuUsageCoreNanoSeconds: 1_500_000_000,
    memoryUsageBytes: 64 * MiB,
    memoryWorkingSetBytes: 49 * MiB,
    memoryRSSBytes: 40 * MiB,
  });
});

t.test('a VM without a cgroup is a CgroupNotFoundError naming it', async (t) => {
  const root = t.testdir({ 'cgroup.controllers': 'cpu memory pids\n' });
  const err = await readVmUsage({ uid: 'gone', parent: 'vkvm', root }).catch((e: unknown) => e);
  t.match(
    { isNotFound: err instanceof CgroupNotFoundError, err },
    { isNotFound: true, err: { kind: 'NotFound', message: 'no cgroup v2:/vkvm/gone for VM gone' } },
  );
});

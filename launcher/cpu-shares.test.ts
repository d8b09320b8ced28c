import t from 'tap';
import { cpuSharesToWeight, milliCpuToShares } from './cpu-shares.js';

t.test('a CPU request → shares → cgroup v2 weight, as the kubelet converts them', async (t) => {
  // Worked out by hand from pkg/kubelet/cm: shares = max(2, m*1024/1000); weight = 1 + (shares-2)*9999/262142, integer division.
  const table: Array<[string, number, number, number]> = [
    ['none (0)', 0, 2, 1],
    ['1m', 1, 2, 1],
    ['100m', 100, 102, 4],
    ['250m', 250, 256, 10],
    ['1 core', 1000, 1024, 39],
    ['2 cores', 2000, 2048, 79],
    ['32 cores', 32_000, 32_768, 1250],
    ['256 cores (the most shares)', 256_000, 262_144, 10_000],
    ['beyond, capped', 1_000_000, 262_144, 10_000],
  ];
  t.same(
    table.map(([name, m]) => [name, milliCpuToShares(m), cpuSharesToWeight(milliCpuToShares(m))]),
    table.map(([name, , shares, weight]) => [name, shares, weight]),
  );
  t.ok(
    cpuSharesToWeight(milliCpuToShares(32_000)) / cpuSharesToWeight(milliCpuToShares(100)) > 300,
    'a 32-core request outweighs 100m by 300 times',
  );
});

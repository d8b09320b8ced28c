import t from 'tap';
import type { Benchmark } from './bench.js';
import { BENCHMARKS, selectBenchmarks } from './registry.js';
import { mean, percentile } from './stats.js';

const fake = (name: string): Benchmark => ({ name, description: '', run: async () => {} });
const ALL = [fake('launcher.start'), fake('launcher.overhead'), fake('pods.start'), fake('launchers.other')];
const names = (bs: Benchmark[]): string[] => bs.map((b) => b.name);

t.test('names pick benchmarks or whole groups, in registry order', async (t) => {
  t.same(
    {
      none: names(selectBenchmarks([], ALL)),
      group: names(selectBenchmarks(['launcher'], ALL)),
      one: names(selectBenchmarks(['pods.start'], ALL)),
      mixed: names(selectBenchmarks(['pods', 'launcher.overhead'], ALL)),
    },
    {
      none: ['launcher.start', 'launcher.overhead', 'pods.start', 'launchers.other'],
      group: ['launcher.start', 'launcher.overhead'],
      one: ['pods.start'],
      mixed: ['launcher.overhead', 'pods.start'],
    },
    'a group name does not pick a group that merely starts with it',
  );
  t.throws(
    () => selectBenchmarks(['launch'], ALL),
    /unknown benchmark launch; known: launcher.start, /,
    'an unknown name lists the known ones',
  );
});

t.test('heavy benchmarks run only when named, by themselves or their group', async (t) => {
  const heavy: Benchmark = { ...fake('leaks.cycles'), heavy: true };
  const all = [...ALL, heavy];
  t.same(
    {
      none: names(selectBenchmarks([], all)),
      group: names(selectBenchmarks(['leaks'], all)),
      one: names(selectBenchmarks(['leaks.cycles'], all)),
    },
    { none: names(ALL), group: ['leaks.cycles'], one: ['leaks.cycles'] },
  );
  t.same(
    BENCHMARKS.filter((b) => b.heavy).map((b) => b.name),
    ['boot-storm.start', 'density.vms', 'leaks.cycles', 'nodes.extra', 'tcg.tb-cache'],
    'the boot storm, density, leak and extra-node runs (a whole vkvm up --nodes 2) and the TCG cache-size sweep are the heavy ones',
  );
});

t.test('registered benchmarks have unique <group>.<name> names', async (t) => {
  const all = names([...BENCHMARKS]);
  t.same(
    all.filter((n) => !/^[a-z][a-z0-9-]*\.[a-z][a-z0-9-]*$/.test(n) || all.indexOf(n) !== all.lastIndexOf(n)),
    [],
  );
});

t.test('nearest-rank percentiles and mean', async (t) => {
  const twenty = Array.from({ length: 20 }, (_, i) => 20 - i); // 20..1, unsorted
  t.same(
    {
      p50: percentile(twenty, 50),
      p95: percentile(twenty, 95),
      p100: percentile(twenty, 100),
      p0: percentile(twenty, 0),
      one: percentile([7], 95),
      mean: mean([1, 2, 6]),
    },
    { p50: 10, p95: 19, p100: 20, p0: 1, one: 7, mean: 3 },
  );
  t.throws(() => percentile([], 50), /no samples/);
});

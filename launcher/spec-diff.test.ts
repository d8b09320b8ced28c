import t from 'tap';
import { testSpec } from '../vmm/testing/specs.js';
import { classifyChange, diffPaths } from './spec-diff.js';

t.test('diffPaths lists changed leaves with array indexes', async (t) => {
  t.same(diffPaths({ a: 1, b: [{ c: 1 }, { c: 2 }] }, { a: 1, b: [{ c: 1 }, { c: 3 }, { c: 4 }] }), ['b[1].c', 'b[2]']);
  t.same(diffPaths({ a: { x: 1 } }, { a: { x: 1 } }), [], 'equal objects differ nowhere');
  t.same(diffPaths({ a: 1 }, { b: 1 }), ['a', 'b'], 'a key on one side only counts');
});

t.test('classifyChange separates live fields from restart fields', async (t) => {
  const running = testSpec();
  t.same(classifyChange(running, testSpec()), { live: [], restart: [] }, 'equal specs');
  t.same(
    classifyChange(running, testSpec({ labels: { team: 'a' }, cpu: { ...running.cpu, limitMillicores: 500, requestMillicores: 250 } })),
    { live: ['cpu.limitMillicores', 'cpu.requestMillicores', 'labels.team'], restart: [] },
    'labels and the CPU quota apply in place',
  );
  t.same(
    classifyChange(running, testSpec({ memoryMiB: 256, cpu: { ...running.cpu, cores: 2 } })),
    { live: [], restart: ['cpu.cores', 'memoryMiB'] },
    'memory and vCPUs need a restart',
  );
});

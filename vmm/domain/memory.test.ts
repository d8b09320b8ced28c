import t from 'tap';
import { configureMemory } from './memory.js';
import { applyBuilder, testSpec } from '../testing/specs.js';

t.test('memory is given in MiB', async (t) => {
  t.same(applyBuilder(configureMemory, testSpec({ memoryMiB: 2048 })).memory, { $: { unit: 'MiB' }, _: 2048 });
});

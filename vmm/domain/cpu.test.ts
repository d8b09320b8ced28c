import t from 'tap';
import { configureCpu } from './cpu.js';
import { applyBuilder, testSpec } from '../testing/specs.js';

t.test('vcpu count is sockets × cores × threads, with the topology alongside', async (t) => {
  const draft = applyBuilder(configureCpu, testSpec({ cpu: { sockets: 2, cores: 3, threads: 2 } }));
  t.same(
    { vcpu: draft.vcpu, cpu: draft.cpu },
    {
      vcpu: { $: { placement: 'static' }, _: 12 },
      cpu: { topology: { $: { sockets: 2, cores: 3, threads: 2 } } },
    },
  );
});

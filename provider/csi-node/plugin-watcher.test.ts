import t from 'tap';
import { missingTopologyLabels, registrationChanges, supportsCsiV1 } from './plugin-watcher.js';

t.test('registrationChanges: new sockets register, vanished ones unregister', async (t) => {
  const registered = new Map([
    ['/reg/a.sock', {}],
    ['/reg/gone.sock', {}],
  ]);
  t.same(registrationChanges(['/reg/a.sock', '/reg/b.sock'], registered), { register: ['/reg/b.sock'], unregister: ['/reg/gone.sock'] });
  t.same(registrationChanges([], new Map()), { register: [], unregister: [] });
});

t.test('supportsCsiV1: any 1.x the plugin announces', async (t) => {
  const cases: Array<[string[], boolean]> = [
    [['1.0.0'], true],
    [['v1.0.0'], true],
    [['0.3.0', '1.2.0'], true],
    [['1'], true],
    [['0.3.0'], false],
    [[], false],
    [['2.0.0'], false],
  ];
  t.same(
    cases.map(([v]) => supportsCsiV1(v)),
    cases.map(([, ok]) => ok),
  );
});

t.test("missingTopologyLabels: the drivers' segments the Node lacks or holds otherwise", async (t) => {
  const drivers: Array<{ topology: Record<string, string> }> = [
    { topology: { 'topology.vkvm.io/node': 'n1' } },
    { topology: { zone: 'z1' } },
  ];
  t.same(
    [
      missingTopologyLabels({}, drivers),
      missingTopologyLabels({ 'topology.vkvm.io/node': 'n1', zone: 'z1', other: 'x' }, drivers),
      missingTopologyLabels({ 'topology.vkvm.io/node': 'old', zone: 'z1' }, drivers),
      missingTopologyLabels({}, []),
    ],
    [{ 'topology.vkvm.io/node': 'n1', zone: 'z1' }, {}, { 'topology.vkvm.io/node': 'n1' }, {}],
  );
});

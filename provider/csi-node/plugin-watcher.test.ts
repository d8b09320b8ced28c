import t from 'tap';
import { registrationChanges, supportsCsiV1 } from './plugin-watcher.js';

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

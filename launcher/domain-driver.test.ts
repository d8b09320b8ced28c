import t from 'tap';
import { parseLifecycleLine } from './domain-driver.js';

t.test('parseLifecycleLine reads virsh event output', async (t) => {
  t.same(parseLifecycleLine("event 'lifecycle' for domain 'vm-1': Stopped Destroyed"), { type: 'Stopped', detail: 'Destroyed' });
  t.same(parseLifecycleLine("event 'lifecycle' for domain 'a b': Shutdown Finished after guest request"), {
    type: 'Shutdown',
    detail: 'Finished after guest request',
  });
  t.equal(parseLifecycleLine("event 'reboot' for domain 'vm-1'"), undefined, 'other events are not lifecycle');
  t.equal(parseLifecycleLine('events received: 3'), undefined);
});

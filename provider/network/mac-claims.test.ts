import t from 'tap';
import { SpecError } from '../../vmm/errors.js';
import { MacClaims, type MacHolder } from './mac-claims.js';

const BRIDGE_MAC = '02:aa:bb:cc:dd:ee';
const VICTIM_MAC = '52:54:00:12:34:56';

/** Claims over `records` (the VMs' port records, changed by the test as a real node's are). */
function claims(records: MacHolder[] = []) {
  return new MacClaims(
    async () => [...records],
    async () => new Map([[BRIDGE_MAC, 'the node bridge']]),
  );
}

/** The cause a claim was refused with, or 'claimed'. */
const outcome = (p: Promise<void>) =>
  p.then(
    () => 'claimed',
    (err: unknown) => (err instanceof SpecError ? err.causes : err),
  );

t.test('a MAC a recorded VM holds is refused to any other VM, naming the field and not the holder', async (t) => {
  const c = claims([{ uid: 'victim', mac: VICTIM_MAC }]);
  const refused = await outcome(c.claim('attacker', VICTIM_MAC, 'interfaces[0].mac'));
  t.match(
    refused,
    [
      {
        path: 'interfaces[0].mac',
        reason: 'FieldValueDuplicate',
        message: `MAC address ${VICTIM_MAC} is in use by another VM on this node`,
      },
    ],
    'refused at the field',
  );
  t.notMatch(JSON.stringify(refused), 'victim', 'the other VM is not named');
  t.equal(await outcome(c.claim('victim', VICTIM_MAC, 'interfaces[0].mac')), 'claimed', 'its holder re-attaches');
  t.equal(await outcome(c.claim('other', '52:54:00:00:00:01', 'interfaces[0].mac')), 'claimed', 'another MAC is free');
});

t.test('claims under way count before their port records exist, until released', async (t) => {
  const records: MacHolder[] = [];
  const c = claims(records);
  // Both attaches read the (empty) records before either claims: the second still loses.
  const both = await Promise.all([c.claim('a', VICTIM_MAC, 'interfaces[0].mac'), outcome(c.claim('b', VICTIM_MAC, 'interfaces[0].mac'))]);
  t.match(both[1], [{ reason: 'FieldValueDuplicate' }], 'concurrent claims of one MAC: one wins');
  // The agent restarts: its claims are gone, a's port record is what is left.
  records.push({ uid: 'a', mac: VICTIM_MAC });
  const restarted = claims(records);
  t.match(
    await outcome(restarted.claim('b', VICTIM_MAC, 'interfaces[0].mac')),
    [{ reason: 'FieldValueDuplicate' }],
    'after a restart, from the record',
  );
  c.release('a');
  records.length = 0;
  t.equal(await outcome(c.claim('b', VICTIM_MAC, 'interfaces[0].mac')), 'claimed', 'free once its VM is detached');
});

t.test('the bridge’s own MAC is no VM’s; two VMs built with one MAC before the check both keep it', async (t) => {
  const c = claims([
    { uid: 'old1', mac: VICTIM_MAC },
    { uid: 'old2', mac: VICTIM_MAC },
  ]);
  t.match(
    await outcome(c.claim('a', BRIDGE_MAC, 'interfaces[0].mac')),
    [{ path: 'interfaces[0].mac', message: /in use by the node bridge/ }],
    'the gateway’s MAC is refused',
  );
  t.same(
    [await outcome(c.claim('old1', VICTIM_MAC, 'interfaces[0].mac')), await outcome(c.claim('old2', VICTIM_MAC, 'interfaces[0].mac'))],
    ['claimed', 'claimed'],
    'VMs already on the bridge with it are not cut off',
  );
  t.match(await outcome(c.claim('new', VICTIM_MAC, 'interfaces[0].mac')), [{ reason: 'FieldValueDuplicate' }], 'a third is refused');
});

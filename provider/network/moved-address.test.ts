import t from 'tap';
import { checkLentAddress } from './moved-address.js';
import { parseIpv4Range } from './ipv4.js';

t.test('a lent address must be a VM address of its home range, which must not overlap this node’s', async (t) => {
  const own = parseIpv4Range('10.244.2.0/24', 'podCIDR');
  const ok = checkLentAddress({ podIP: '10.244.1.7', homeCidr: '10.244.1.0/24' }, own);
  t.same([ok.podIP, ok.range.cidr, ok.home], ['10.244.1.7', '10.244.1.0/24', false], 'another node’s address');
  t.equal(checkLentAddress({ podIP: '10.244.2.9', homeCidr: '10.244.2.0/24' }, own).home, true, 'its own, coming back');
  const refused: Array<[{ podIP: string; homeCidr: string }, RegExp]> = [
    [{ podIP: '10.244.1.7', homeCidr: 'nope' }, /^lent\.homeCidr: "nope" is not a CIDR/],
    [
      { podIP: '10.244.9.7', homeCidr: '10.244.1.0/24' },
      /^lent\.podIP: 10\.244\.9\.7 is not a VM address of 10\.244\.1\.0\/24 \(lent\.homeCidr\) nor of any node's pod range/,
    ],
    [{ podIP: '10.244.1.1', homeCidr: '10.244.1.0/24' }, /^lent\.podIP: .* is not a VM address/],
    [{ podIP: '10.244.1.255', homeCidr: '10.244.1.0/24' }, /^lent\.podIP: .* is not a VM address/],
    [{ podIP: '10.244.1.07', homeCidr: '10.244.1.0/24' }, /^lent\.podIP: "10\.244\.1\.07" is not an IPv4 address/],
    [
      { podIP: '10.244.5.7', homeCidr: '10.244.0.0/16' },
      /^lent\.homeCidr: 10\.244\.0\.0\/16 overlaps this node's pod range 10\.244\.2\.0\/24/,
    ],
  ];
  for (const [lent, error] of refused) t.throws(() => checkLentAddress(lent, own, ['10.244.3.0/24']), error, JSON.stringify(lent));
  const movedOn = checkLentAddress({ podIP: '10.244.3.7', homeCidr: '10.244.1.0/24' }, own, ['10.244.1.0/24', '10.244.3.0/24']);
  t.same(
    [movedOn.range.cidr, movedOn.home],
    ['10.244.3.0/24', false],
    'moving on from the node it first moved to: the hint is that node’s range; the home is the peer range holding the address',
  );
  t.equal(
    checkLentAddress({ podIP: '10.244.2.9', homeCidr: '10.244.1.0/24' }, own).home,
    true,
    'back home from a node it moved on to: this node’s range holds it',
  );
});

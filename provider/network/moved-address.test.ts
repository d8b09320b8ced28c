import path from 'node:path';
import t from 'tap';
import { pino } from 'pino';
import { Ipam } from './ipam.js';
import { checkLentAddress, MovedAddresses, type LendingSource } from './moved-address.js';
import { parseIpv4Range } from './ipv4.js';
import type { PeerNode } from './peer-routes.js';

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

t.test('the home lends where the VMI says its VM runs, records it, and routes only what is agreed or confirmed', async (t) => {
  const dir = t.testdir();
  const range = parseIpv4Range('10.244.0.0/24', 'podCIDR');
  const ipam = await Ipam.open(path.join(dir, 'leases.json'), range);
  const ip = await ipam.lease('vm1');
  const vmi = { namespace: 'ns', name: 'vm', uid: 'u1' };
  await ipam.lend('vm1', 'b', new Date(), vmi);
  // What the VMI says, as LentVmis would answer: undefined until read.
  let where: string | null | undefined;
  const followed: string[][] = [];
  const lending: LendingSource = {
    follow: (lent) => void followed.push(Object.values(lent).map((l) => l.vmi?.uid ?? '')),
    whereIs: () => where,
  };
  const moved = (l?: LendingSource) =>
    new MovedAddresses({
      nodeName: 'h',
      dir,
      bridge: 'vkvm0',
      vmDir: (uid) => path.join(dir, 'vms', uid),
      peers: () => [],
      ports: async () => [],
      ...(l ? { lending: l } : {}),
      log: pino({ level: 'silent' }),
    });
  const b = (hosted: boolean): PeerNode => ({
    name: 'b',
    podCidr: '10.244.1.0/24',
    internalIP: '192.0.2.2',
    ...(hosted ? { hosted: { [ip]: '2026-11-27T10:00:00Z' } } : {}),
  });
  const c = (hosted: boolean): PeerNode => ({
    name: 'c',
    podCidr: '10.244.2.0/24',
    internalIP: '192.0.2.3',
    ...(hosted ? { hosted: { [ip]: '2026-11-27T10:05:00Z' } } : {}),
  });
  const seen = async (m: MovedAddresses, peers: PeerNode[]) => {
    const { plan, claims } = await m.network({ range, ipam }, peers);
    return { lent: claims.lent, routes: plan.routes, recorded: ipam.lent().vm1?.node };
  };
  const home = moved(lending);
  const steps = {
    notReadYet: await seen(home, [b(true), c(true)]),
    readHere: ((where = 'b'), await seen(home, [b(false), c(true)])),
    movedOnToC: ((where = 'c'), await seen(home, [b(true), c(true)])),
    restarted: ((where = undefined), await seen(moved(lending), [b(false), c(true)])),
    vmiGone: ((where = null), await seen(home, [b(false), c(true)])),
  };
  t.same(
    steps,
    {
      notReadYet: { lent: { [ip]: 'b' }, routes: [{ ip, via: '192.0.2.2' }], recorded: 'b' },
      readHere: { lent: { [ip]: 'b' }, routes: [{ ip, via: '192.0.2.2' }], recorded: 'b' },
      movedOnToC: { lent: { [ip]: 'c' }, routes: [{ ip, via: '192.0.2.3' }], recorded: 'c' },
      restarted: { lent: { [ip]: 'c' }, routes: [{ ip, via: '192.0.2.3' }], recorded: 'c' },
      vmiGone: { lent: {}, routes: [], recorded: 'c' },
    },
    'lent to b (b’s claim agrees; c’s is ignored), then confirmed by the VMI before b claims, then moved on to c and recorded, ' +
      'the same after a restart before the VMI is read, and to nobody once the VMI is gone',
  );
  t.same(followed.at(-1), ['u1'], 'the lent lease’s VMI is followed');
});

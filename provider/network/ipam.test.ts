import t from 'tap';
import path from 'node:path';
import { readFile } from 'node:fs/promises';
import { Ipam } from './ipam.js';
import { parseIpv4Range } from './ipv4.js';

t.test('leases are stable per owner, unique, persisted and handed out round-robin', async (t) => {
  const dir = t.testdir();
  const file = path.join(dir, 'leases.json');
  const range = parseIpv4Range('10.9.0.0/29', 'podCIDR');
  const ipam = await Ipam.open(file, range);
  const [a, b, again] = await Promise.all([ipam.lease('a'), ipam.lease('b'), ipam.lease('a')]);
  t.same([a, b, again], ['10.9.0.2', '10.9.0.3', '10.9.0.2'], 'first addresses after the gateway; the same owner keeps its address');
  await ipam.release('a');
  t.equal(await ipam.lease('c'), '10.9.0.4', 'a released address is not reused at once');
  const reopened = await Ipam.open(file, range);
  t.same(reopened.leases(), { b: '10.9.0.3', c: '10.9.0.4' }, 'leases survive a restart');
  t.same(JSON.parse(await readFile(file, 'utf8')).last, '10.9.0.4');
  const more = await Promise.all(['d', 'e', 'f'].map((o) => reopened.lease(o)));
  t.same(more, ['10.9.0.5', '10.9.0.6', '10.9.0.2'], 'wraps around below the broadcast address');
  t.equal(new Set(Object.values(reopened.leases())).size, 5, 'no address held twice');
  await t.rejects(reopened.lease('g'), /no free address left in 10\.9\.0\.0\/29/, 'a full range says so');
});

t.test('a lease file of another range is refused while it holds leases', async (t) => {
  const file = path.join(t.testdir(), 'leases.json');
  const ipam = await Ipam.open(file, parseIpv4Range('10.9.0.0/24', 'podCIDR'));
  await ipam.lease('a');
  await t.rejects(
    Ipam.open(file, parseIpv4Range('10.9.1.0/24', 'podCIDR')),
    /holds leases in 10\.9\.0\.0\/24 but the node's pod range is now 10\.9\.1\.0\/24/,
  );
  await ipam.release('a');
  const moved = await Ipam.open(file, parseIpv4Range('10.9.1.0/24', 'podCIDR'));
  t.equal(await moved.lease('b'), '10.9.1.2', 'an empty file follows the new range');
});

t.test('ranges are validated naming the field', async (t) => {
  t.throws(() => parseIpv4Range('10.0.0.0/30', '--pod-cidr'), /--pod-cidr: 10\.0\.0\.0\/30 is too small/);
  t.throws(() => parseIpv4Range('fd00::/64', 'spec.podCIDR'), /spec\.podCIDR: fd00::\/64 is IPv6/);
  t.throws(() => parseIpv4Range('nope', '--pod-cidr'), /--pod-cidr: "nope" is not a CIDR/);
  t.same(parseIpv4Range('10.1.2.3/24', 'x').cidr, '10.1.2.0/24', 'host bits are cleared');
});

t.test('a lent lease stays taken until released; adopting takes an address back as an ordinary lease', async (t) => {
  const file = path.join(t.testdir(), 'leases.json');
  const range = parseIpv4Range('10.9.0.0/29', 'podCIDR');
  const ipam = await Ipam.open(file, range);
  const ip = await ipam.lease('src');
  await ipam.lend('src', 'node-b', new Date('2026-11-27T10:00:00Z'));
  await ipam.lend('nobody', 'node-b');
  t.same(ipam.lent(), { src: { node: 'node-b', since: '2026-11-27T10:00:00.000Z' } }, 'only a held lease can be lent');
  t.not(await ipam.lease('other'), ip, 'a lent address is not handed out');
  t.same((await Ipam.open(file, range)).lent(), ipam.lent(), 'lent survives a restart');
  await ipam.adopt('back', ip);
  t.same([ipam.addressOf('back'), ipam.addressOf('src'), ipam.lent()], [ip, undefined, {}], 'back home: the returning VM’s own lease');
  await ipam.lease('x');
  await ipam.lend('x', 'node-c');
  await ipam.release('x');
  t.same(ipam.lent(), {}, 'releasing a lent lease forgets it');
});

t.test('a lent lease follows its VM to the next node, keeping the VMI it was first lent with', async (t) => {
  const file = path.join(t.testdir(), 'leases.json');
  const range = parseIpv4Range('10.9.0.0/29', 'podCIDR');
  const ipam = await Ipam.open(file, range);
  await ipam.lease('src');
  const vmi = { namespace: 'ns', name: 'vm', uid: 'u1' };
  await ipam.lend('src', 'node-b', new Date('2026-11-27T10:00:00Z'), vmi);
  await ipam.lend('src', 'node-b', new Date('2026-11-27T10:01:00Z'));
  const first = ipam.lent();
  await ipam.lend('src', 'node-c', new Date('2026-11-27T10:02:00Z'));
  t.same(
    [first, (await Ipam.open(file, range)).lent()],
    [
      { src: { node: 'node-b', since: '2026-11-27T10:00:00.000Z', vmi } },
      { src: { node: 'node-c', since: '2026-11-27T10:02:00.000Z', vmi } },
    ],
    'lent to the same node again: unchanged; to another: since then, with its VMI, across a restart',
  );
});

import t from 'tap';
import { ipInRanges, parseNodeIpRanges } from './serving-policy.js';

t.test('node ranges are CIDRs, kept in network form', async (t) => {
  t.same(parseNodeIpRanges(['192.0.2.7/24', '2001:db8::5/64', '10.0.0.0/8']), ['192.0.2.0/24', '2001:db8::/64', '10.0.0.0/8']);
  for (const bad of ['192.0.2.7', '10/8', '192.0.2.0/33', 'example.com/24', ''])
    t.throws(() => parseNodeIpRanges([bad]), /is not a CIDR/, JSON.stringify(bad));
});

t.test('an address is in a range of its own family only; IPv4-mapped IPv6 counts as IPv4', async (t) => {
  const ranges = ['192.0.2.0/24', '2001:db8::/64'];
  t.same(
    ['192.0.2.9', '192.0.3.1', '2001:db8::9', '2001:db9::1', '::ffff:192.0.2.9'].map((ip) => ipInRanges(ip, ranges)),
    [true, false, true, false, true],
  );
  t.notOk(ipInRanges('192.0.2.9', []), 'no ranges: nothing is inside');
});

t.test("under vkvm up the ranges are the host's networks, without loopback, link-local and the pod bridge", async (t) => {
  const { localNodeRanges } = await t.mockImport<typeof import('./serving-policy.js')>('./serving-policy.js', {
    'node:os': {
      networkInterfaces: () => ({
        lo: [{ address: '127.0.0.1', cidr: '127.0.0.1/8', internal: true, family: 'IPv4' }],
        eth0: [
          { address: '192.0.2.2', cidr: '192.0.2.2/24', internal: false, family: 'IPv4' },
          { address: 'fe80::1', cidr: 'fe80::1/64', internal: false, family: 'IPv6' },
          { address: '2001:db8::2', cidr: '2001:db8::2/64', internal: false, family: 'IPv6' },
        ],
        eth1: [{ address: '192.0.2.3', cidr: '192.0.2.3/24', internal: false, family: 'IPv4' }],
        vkvm0: [{ address: '10.244.0.1', cidr: '10.244.0.1/24', internal: false, family: 'IPv4' }],
      }),
    },
  });
  t.same(localNodeRanges(['vkvm0']), ['192.0.2.0/24', '2001:db8::/64']);
});

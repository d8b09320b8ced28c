import t from 'tap';
import { defaultRouteAddress, defaultRouteInterface, ipv4Of } from './default-address.js';

const ROUTES = `Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth1\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0
eth0\t00000000\t010010AC\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t000010AC\t00000000\t0001\t0\t0\t100\t0000FFFF\t0\t0\t0
wg0\t00000000\t00000000\t0000\t0\t0\t1\t00000000\t0\t0\t0
`;

t.test('the default route with the lowest metric that is up; none without one', async (t) => {
  t.same(
    {
      picked: defaultRouteInterface(ROUTES),
      none: defaultRouteInterface(ROUTES.split('\n').slice(0, 1).join('\n')),
      empty: defaultRouteInterface(''),
    },
    { picked: 'eth0', none: undefined, empty: undefined },
  );
});

t.test("an interface's first IPv4 address, loopback and IPv6 aside", async (t) => {
  const ifs = {
    eth0: [
      { address: 'fe80::1', family: 'IPv6', internal: false },
      { address: '172.16.0.5', family: 'IPv4', internal: false },
    ],
    lo: [{ address: '127.0.0.1', family: 'IPv4', internal: true }],
  } as unknown as Parameters<typeof ipv4Of>[1];
  t.same(
    { eth0: ipv4Of('eth0', ifs), lo: ipv4Of('lo', ifs), missing: ipv4Of('eth9', ifs) },
    { eth0: '172.16.0.5', lo: undefined, missing: undefined },
  );
});

t.test('on this host: an address of a real interface, or null without a default route', async (t) => {
  const ip = await defaultRouteAddress();
  t.ok(ip === null || /^\d+\.\d+\.\d+\.\d+$/.test(ip), `got ${ip}`);
  t.equal(await defaultRouteAddress('/nonexistent'), null, 'no route table: null');
});

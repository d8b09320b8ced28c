import { randomBytes, randomInt } from 'node:crypto';
import t from 'tap';
import { pino } from 'pino';
import type { V1Node } from '@kubernetes/client-node';
import { run } from './host.js';
import { ensurePeerRoutes, peersOf } from './peer-routes.js';

const node = (name: string, spec: V1Node['spec'], addresses: Array<[string, string]>): V1Node => ({
  metadata: { name },
  spec,
  status: { addresses: addresses.map(([type, address]) => ({ type, address })) },
});

t.test('peers are the other nodes with an IPv4 pod range and an IPv4 InternalIP', async (t) => {
  const nodes = [
    node('self', { podCIDR: '10.244.0.0/24' }, [['InternalIP', '192.0.2.1']]),
    node('b', { podCIDR: '10.244.1.0/24' }, [
      ['Hostname', 'b'],
      ['InternalIP', '192.0.2.2'],
    ]),
    node('dual', { podCIDRs: ['fd00:1::/64', '10.244.2.7/24'] }, [
      ['InternalIP', 'fd00::3'],
      ['InternalIP', '192.0.2.3'],
    ]),
    node('no-range', {}, [['InternalIP', '192.0.2.4']]),
    node('no-address', { podCIDR: '10.244.5.0/24' }, [['Hostname', 'x']]),
    node('v6-only', { podCIDR: 'fd00:2::/64' }, [['InternalIP', 'fd00::6']]),
    node('garbage', { podCIDR: 'not-a-cidr' }, [['InternalIP', '192.0.2.9']]),
  ];
  t.same(
    peersOf(nodes, 'self'),
    [
      { name: 'b', podCidr: '10.244.1.0/24', internalIP: '192.0.2.2' },
      { name: 'dual', podCidr: '10.244.2.0/24', internalIP: '192.0.2.3' },
    ],
    'itself, nodes without a range or address, IPv6-only and unparsable ranges are left out; ranges are normalized',
  );
});

t.test('a peer’s hosted addresses come from its annotation, junk left out', async (t) => {
  const b = node('b', { podCIDR: '10.244.1.0/24' }, [['InternalIP', '192.0.2.2']]);
  b.metadata!.annotations = { 'vkvm.io/hosted-pod-ips': '{"10.244.0.7":"2026-11-27T10:00:00.000Z","x":"y"}' };
  t.same(peersOf([b], 'self'), [
    { name: 'b', podCidr: '10.244.1.0/24', internalIP: '192.0.2.2', hosted: { '10.244.0.7': '2026-11-27T10:00:00.000Z' } },
  ]);
});

t.test('routes on the real host: added via the peer, foreign and unreachable ones left alone, removed when the peer goes', async (t) => {
  const dev = `vkd${randomBytes(4).toString('hex')}`;
  const x = randomInt(256);
  const route = async (cidr: string) => {
    const [r] = JSON.parse(await run(['ip', '-j', '-4', 'route', 'show', 'exact', cidr])) as Array<{ gateway?: string; dev?: string }>;
    return r && { ...(r.gateway ? { gateway: r.gateway } : {}), dev: r.dev };
  };
  // A veth (no dummy driver on every kernel); its other end only needs to be up.
  await run(['ip', 'link', 'add', dev, 'type', 'veth', 'peer', 'name', `${dev}p`]);
  await run(['ip', 'link', 'set', `${dev}p`, 'up']);
  t.teardown(() => run(['ip', 'link', 'del', dev]).catch(() => undefined));
  await run(['ip', 'addr', 'add', `198.19.${x}.1/24`, 'dev', dev]);
  await run(['ip', 'link', 'set', dev, 'up']);
  // Someone else's route to a range a peer claims.
  await run(['ip', 'route', 'add', `10.78.${x}.0/24`, 'dev', dev]);

  const reachable = { name: 'p', podCidr: `10.77.${x}.0/24`, internalIP: `198.19.${x}.2` };
  const foreign = { name: 'q', podCidr: `10.78.${x}.0/24`, internalIP: `198.19.${x}.3` };
  const offLink = { name: 'r', podCidr: `10.79.${x}.0/24`, internalIP: '203.0.113.9' };
  const warned = new Set<string>();
  const log = pino({ level: 'silent' });
  const routes = await ensurePeerRoutes([reachable, foreign, offLink], [], '10.244.0.0/24', log, warned);
  t.teardown(() => run(['ip', 'route', 'del', reachable.podCidr]).catch(() => undefined));
  t.same(routes, [{ cidr: reachable.podCidr, via: reachable.internalIP }], 'only the reachable peer’s route is ours');
  t.same(
    {
      reachable: await route(reachable.podCidr),
      foreign: await route(foreign.podCidr),
      offLink: await route(offLink.podCidr),
      warnings: warned.size,
    },
    { reachable: { gateway: reachable.internalIP, dev }, foreign: { dev }, offLink: undefined, warnings: 2 },
    'a route via the peer; the foreign route untouched; none via an off-link next hop; one warning each for the two skipped',
  );
  t.equal((await run(['sysctl', '-n', `net.ipv4.conf.${dev}.forwarding`])).trim(), '1', 'forwarding on where the peer’s pods come in');
  t.same(await ensurePeerRoutes([reachable], routes, '10.244.0.0/24', log, warned), routes, 'idempotent');
  t.same(await ensurePeerRoutes([], routes, '10.244.0.0/24', log, warned), [], 'the peer gone: nothing is ours');
  t.same([await route(reachable.podCidr), await route(foreign.podCidr)], [undefined, { dev }], 'its route removed, the foreign one kept');
});

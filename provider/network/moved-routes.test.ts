import t from 'tap';
import { parseHostedPodIps, renderHostedPodIps } from './hosted-annotation.js';
import { lentToRelease, planMovedRoutes, staleHandOvers, type HandedOver, type MovedPlan } from './moved-routes.js';
import type { PeerNode } from './peer-routes.js';

const T0 = '2026-11-27T10:00:00.000Z';
const T1 = '2026-11-27T10:05:00.000Z';
const peer = (name: string, internalIP: string, podCidr: string, hosted?: Record<string, string>): PeerNode => ({
  name,
  internalIP,
  podCidr,
  ...(hosted ? { hosted } : {}),
});

t.test('the annotation: sorted JSON of address → when taken; none is a removal; junk in a peer’s is ignored', async (t) => {
  t.equal(renderHostedPodIps({ '10.0.1.9': T1, '10.0.1.10': T0 }), `{"10.0.1.10":"${T0}","10.0.1.9":"${T1}"}`);
  t.equal(renderHostedPodIps({}), null);
  t.same(
    [
      parseHostedPodIps(undefined),
      parseHostedPodIps('not json'),
      parseHostedPodIps('["10.0.0.1"]'),
      parseHostedPodIps(`{"10.0.1.9":"${T0}","300.1.1.1":"${T0}","10.0.1.8":"yesterday","10.0.1.7":7,"10.0.1.6 via x":"${T0}"}`),
    ],
    [{}, {}, {}, { '10.0.1.9': T0 }],
  );
});

t.test('the plan: which /32 goes where, what is published, forwarded and NATed', async (t) => {
  const base = { ownCidr: '10.0.2.0/24', bridge: 'vkvm0', hostedHere: [], handedOver: [], peers: [], local: new Set<string>() };
  const cases: Array<[string, Parameters<typeof planMovedRoutes>[0], MovedPlan]> = [
    ['nothing moved: nothing routed', base, { routes: [], hosted: {}, forwarded: [], natted: [] }],
    [
      'a VM of another range claimed here: /32 to the bridge, published, NATed out',
      { ...base, hostedHere: [{ ip: '10.0.1.5', claimedAt: T0 }], local: new Set(['10.0.1.5']) },
      { routes: [{ ip: '10.0.1.5', dev: 'vkvm0' }], hosted: { '10.0.1.5': T0 }, forwarded: [], natted: ['10.0.1.5'] },
    ],
    [
      'back home: its /32 on the bridge beats a route away, but it is not published',
      { ...base, hostedHere: [{ ip: '10.0.2.5', claimedAt: T0 }], local: new Set(['10.0.2.5']) },
      { routes: [{ ip: '10.0.2.5', dev: 'vkvm0' }], hosted: {}, forwarded: [], natted: [] },
    ],
    [
      'a peer hosts an address: /32 via its InternalIP, let through',
      { ...base, peers: [peer('b', '192.0.2.2', '10.0.1.0/24', { '10.0.2.7': T0 })] },
      { routes: [{ ip: '10.0.2.7', via: '192.0.2.2' }], hosted: {}, forwarded: ['10.0.2.7'], natted: [] },
    ],
    [
      'two peers list it (one took it, the other has not handed it on yet): the latest taker wins',
      {
        ...base,
        peers: [peer('b', '192.0.2.2', '10.0.1.0/24', { '10.0.3.7': T1 }), peer('c', '192.0.2.3', '10.0.3.0/24', { '10.0.3.7': T0 })],
      },
      { routes: [{ ip: '10.0.3.7', via: '192.0.2.2' }], hosted: {}, forwarded: ['10.0.3.7'], natted: [] },
    ],
    [
      'handed over and not yet published by the taker: via the record',
      { ...base, handedOver: [{ ip: '10.0.2.9', node: 'b', via: '192.0.2.2', at: T0 }] },
      { routes: [{ ip: '10.0.2.9', via: '192.0.2.2' }], hosted: {}, forwarded: ['10.0.2.9'], natted: [] },
    ],
    [
      'the VM moved on again: the annotation beats the record',
      {
        ...base,
        handedOver: [{ ip: '10.0.2.9', node: 'b', via: '192.0.2.2', at: T0 }],
        peers: [peer('c', '192.0.2.3', '10.0.3.0/24', { '10.0.2.9': T1 })],
      },
      { routes: [{ ip: '10.0.2.9', via: '192.0.2.3' }], hosted: {}, forwarded: ['10.0.2.9'], natted: [] },
    ],
    [
      'an address whose VM runs here (a peer has not dropped it yet) is never routed away',
      {
        ...base,
        hostedHere: [{ ip: '10.0.1.5', claimedAt: T1 }],
        local: new Set(['10.0.1.5']),
        peers: [peer('b', '192.0.2.2', '10.0.1.0/24', { '10.0.1.5': T0 })],
        handedOver: [{ ip: '10.0.1.5', node: 'b', via: '192.0.2.2', at: T0 }],
      },
      { routes: [{ ip: '10.0.1.5', dev: 'vkvm0' }], hosted: { '10.0.1.5': T1 }, forwarded: [], natted: ['10.0.1.5'] },
    ],
  ];
  for (const [name, input, want] of cases) t.same(planMovedRoutes(input), want, name);
});

t.test('handed-over records go once a peer publishes the address, it is back, or after the keep time', async (t) => {
  const r = (ip: string, at: string): HandedOver => ({ ip, node: 'b', via: '192.0.2.2', at });
  const records = [r('10.0.2.5', T0), r('10.0.2.6', T0), r('10.0.2.7', T1), r('10.0.2.8', T1), r('10.0.1.9', T1)];
  const peers = [peer('b', '192.0.2.2', '10.0.1.0/24', { '10.0.2.5': T0 })];
  const now = Date.parse(T1) + 60_000;
  t.same(
    staleHandOvers(records, peers, new Set(['10.0.2.8']), now, 120_000).map((h) => h.ip),
    ['10.0.2.5', '10.0.2.6', '10.0.2.8', '10.0.1.9'],
    'published by a peer, older than the keep time, back here, handed to its home node b; a fresh one stays',
  );
});

t.test('a lent lease is released only after its address was hosted nowhere for the whole grace period', async (t) => {
  const lent = { vmA: '10.0.2.5', vmB: '10.0.2.6' };
  const first = lentToRelease({ lent, hostedSomewhere: new Set(['10.0.2.5']), unhostedSinceMs: new Map(), nowMs: 1000, graceMs: 500 });
  t.same([first.release, [...first.unhostedSinceMs]], [[], [['vmB', 1000]]], 'hosted: kept; unhosted: the clock starts');
  const during = lentToRelease({
    lent,
    hostedSomewhere: new Set(['10.0.2.5']),
    unhostedSinceMs: first.unhostedSinceMs,
    nowMs: 1400,
    graceMs: 500,
  });
  t.same(during.release, [], 'within the grace period');
  const hostedAgain = lentToRelease({
    lent,
    hostedSomewhere: new Set(['10.0.2.5', '10.0.2.6']),
    unhostedSinceMs: during.unhostedSinceMs,
    nowMs: 1450,
    graceMs: 500,
  });
  t.same([hostedAgain.release, [...hostedAgain.unhostedSinceMs]], [[], []], 'seen hosted again: the clock stops');
  const restarted = lentToRelease({
    lent,
    hostedSomewhere: new Set(['10.0.2.5']),
    unhostedSinceMs: hostedAgain.unhostedSinceMs,
    nowMs: 1600,
    graceMs: 500,
  });
  const after = lentToRelease({
    lent,
    hostedSomewhere: new Set(['10.0.2.5']),
    unhostedSinceMs: restarted.unhostedSinceMs,
    nowMs: 2100,
    graceMs: 500,
  });
  t.same(
    [restarted.release, after.release, [...after.unhostedSinceMs]],
    [[], ['vmB'], []],
    'released a full grace period after last seen hosted',
  );
});

import t from 'tap';
import { parseHostedPodIps, parseLentPodIps, renderHostedPodIps, renderLentPodIps } from './hosted-annotation.js';
import { lentToRelease, planMovedRoutes, staleHandOvers, type HandedOver, type MovedPlan } from './moved-routes.js';
import type { PeerNode } from './peer-routes.js';

const T0 = '2026-11-27T10:00:00.000Z';
const T1 = '2026-11-27T10:05:00.000Z';
const peer = (
  name: string,
  internalIP: string,
  podCidr: string,
  hosted?: Record<string, string>,
  lent?: Record<string, string>,
): PeerNode => ({
  name,
  internalIP,
  podCidr,
  ...(hosted ? { hosted } : {}),
  ...(lent ? { lent } : {}),
});

t.test('the annotations: sorted JSON; none is a removal; junk in a peer’s is ignored', async (t) => {
  t.equal(renderHostedPodIps({ '10.0.1.9': T1, '10.0.1.10': T0 }), `{"10.0.1.10":"${T0}","10.0.1.9":"${T1}"}`);
  t.equal(renderHostedPodIps({}), null);
  t.equal(renderLentPodIps({ '10.0.2.9': 'node-b', '10.0.2.10': 'node-c' }), '{"10.0.2.10":"node-c","10.0.2.9":"node-b"}');
  t.equal(renderLentPodIps({}), null);
  t.same(
    [
      parseHostedPodIps(undefined),
      parseHostedPodIps('not json'),
      parseHostedPodIps('["10.0.0.1"]'),
      parseHostedPodIps(`{"10.0.1.9":"${T0}","300.1.1.1":"${T0}","10.0.1.8":"yesterday","10.0.1.7":7,"10.0.1.6 via x":"${T0}"}`),
    ],
    [{}, {}, {}, { '10.0.1.9': T0 }],
  );
  t.same(
    [
      parseLentPodIps(undefined),
      parseLentPodIps('{'),
      parseLentPodIps('null'),
      parseLentPodIps('{"10.0.2.9":"node-b.example","10.0.2.8":"Node_B","10.0.2.7":"","10.0.2.6":["b"],"10.0.2.300":"b","10.0.2.5":"-b"}'),
      parseLentPodIps(`{"10.0.2.4":"${'a'.repeat(254)}"}`),
    ],
    [{}, {}, {}, { '10.0.2.9': 'node-b.example' }, {}],
    'only an IPv4 address lent to a well-formed Node name',
  );
});

t.test('the plan: which /32 goes where, what is claimed, forwarded and NATed, and what is agreed', async (t) => {
  // This node is h (10.0.2.0/24); b holds 10.0.1.0/24 at 192.0.2.2, c 10.0.3.0/24 at 192.0.2.3.
  const base = {
    self: 'h',
    ownCidr: '10.0.2.0/24',
    bridge: 'vkvm0',
    hostedHere: [],
    lending: {},
    confirmed: new Set<string>(),
    handedOver: [],
    peers: [] as PeerNode[],
    local: new Set<string>(),
  };
  const b = (hosted?: Record<string, string>, lent?: Record<string, string>) => peer('b', '192.0.2.2', '10.0.1.0/24', hosted, lent);
  const c = (hosted?: Record<string, string>, lent?: Record<string, string>) => peer('c', '192.0.2.3', '10.0.3.0/24', hosted, lent);
  const none = { routes: [], hosted: {}, forwarded: [], natted: [], agreed: {} };
  const cases: Array<[string, Parameters<typeof planMovedRoutes>[0], MovedPlan]> = [
    ['nothing moved: nothing routed', base, none],
    [
      'a VM of b’s range claimed here, lent here by b: /32 to the bridge, claimed, NATed out, agreed',
      { ...base, hostedHere: [{ ip: '10.0.1.5', claimedAt: T0 }], local: new Set(['10.0.1.5']), peers: [b({}, { '10.0.1.5': 'h' })] },
      {
        routes: [{ ip: '10.0.1.5', dev: 'vkvm0' }],
        hosted: { '10.0.1.5': T0 },
        forwarded: [],
        natted: ['10.0.1.5'],
        agreed: { '10.0.1.5': 'h' },
      },
    ],
    [
      'back home: its /32 on the bridge beats a route away, but it is not claimed',
      { ...base, hostedHere: [{ ip: '10.0.2.5', claimedAt: T0 }], local: new Set(['10.0.2.5']) },
      { ...none, routes: [{ ip: '10.0.2.5', dev: 'vkvm0' }] },
    ],
    [
      'c claims an address of b’s range that b lends to c: /32 via c, let through',
      { ...base, peers: [b({}, { '10.0.1.7': 'c' }), c({ '10.0.1.7': T0 })] },
      { ...none, routes: [{ ip: '10.0.1.7', via: '192.0.2.3' }], forwarded: ['10.0.1.7'], agreed: { '10.0.1.7': 'c' } },
    ],
    ['hostile: c claims an address of b’s range b does not lend: nothing', { ...base, peers: [b(), c({ '10.0.1.7': T0 })] }, none],
    [
      'hostile: c claims an address of this node’s range this node does not lend: nothing',
      { ...base, peers: [b(), c({ '10.0.2.7': T0 })] },
      none,
    ],
    [
      'hostile: c claims an address this node lends to b: via b only once b claims it, never via c',
      { ...base, lending: { '10.0.2.7': 'b' }, peers: [b({ '10.0.2.7': T0 }), c({ '10.0.2.7': T1 })] },
      { ...none, routes: [{ ip: '10.0.2.7', via: '192.0.2.2' }], forwarded: ['10.0.2.7'], agreed: { '10.0.2.7': 'b' } },
    ],
    [
      'this node lends to b and its VMI confirms it, b has not claimed yet (a chain move’s hand-over): via b',
      { ...base, lending: { '10.0.2.9': 'b' }, confirmed: new Set(['10.0.2.9']), peers: [b(), c()] },
      { ...none, routes: [{ ip: '10.0.2.9', via: '192.0.2.2' }], forwarded: ['10.0.2.9'] },
    ],
    [
      'this node lends to b from its own record alone, b does not claim it: nothing (the VM may have gone)',
      { ...base, lending: { '10.0.2.9': 'b' }, peers: [b(), c()] },
      none,
    ],
    [
      'a confirmed lending of an address outside this node’s range: nothing',
      { ...base, lending: { '10.0.1.9': 'b' }, confirmed: new Set(['10.0.1.9']), peers: [b(), c()] },
      none,
    ],
    [
      'handed over and not yet agreed: via the record',
      { ...base, handedOver: [{ ip: '10.0.2.9', node: 'b', via: '192.0.2.2', at: T0 }] },
      { ...none, routes: [{ ip: '10.0.2.9', via: '192.0.2.2' }], forwarded: ['10.0.2.9'] },
    ],
    [
      'handed over to b, moved on to c: the agreed claim beats the record',
      {
        ...base,
        lending: { '10.0.2.9': 'c' },
        handedOver: [{ ip: '10.0.2.9', node: 'b', via: '192.0.2.2', at: T0 }],
        peers: [b(), c({ '10.0.2.9': T1 })],
      },
      { ...none, routes: [{ ip: '10.0.2.9', via: '192.0.2.3' }], forwarded: ['10.0.2.9'], agreed: { '10.0.2.9': 'c' } },
    ],
    [
      'handed over by this node (not the home) to b; c claims it unlent: the record stands',
      {
        ...base,
        handedOver: [{ ip: '10.0.1.9', node: 'b', via: '192.0.2.2', at: T0 }],
        peers: [b({}, { '10.0.1.9': 'h' }), c({ '10.0.1.9': T1 })],
      },
      { ...none, routes: [{ ip: '10.0.1.9', via: '192.0.2.2' }], forwarded: ['10.0.1.9'] },
    ],
    [
      'an address whose VM runs here (a peer has not dropped it yet) is never routed away',
      {
        ...base,
        hostedHere: [{ ip: '10.0.1.5', claimedAt: T1 }],
        local: new Set(['10.0.1.5']),
        peers: [b({}, { '10.0.1.5': 'c' }), c({ '10.0.1.5': T0 })],
        handedOver: [{ ip: '10.0.1.5', node: 'c', via: '192.0.2.3', at: T0 }],
      },
      {
        routes: [{ ip: '10.0.1.5', dev: 'vkvm0' }],
        hosted: { '10.0.1.5': T1 },
        forwarded: [],
        natted: ['10.0.1.5'],
        agreed: { '10.0.1.5': 'c' },
      },
    ],
  ];
  for (const [name, input, want] of cases) t.same(planMovedRoutes(input), want, name);
});

t.test('handed-over records go once a claim is agreed, it is back, or after the keep time', async (t) => {
  const r = (ip: string, at: string): HandedOver => ({ ip, node: 'b', via: '192.0.2.2', at });
  const records = [r('10.0.2.5', T0), r('10.0.2.6', T0), r('10.0.2.7', T1), r('10.0.2.8', T1), r('10.0.1.9', T1), r('10.0.2.4', T1)];
  // b claims 10.0.2.4 too, but nobody lends it to b: its record stays.
  const peers = [peer('b', '192.0.2.2', '10.0.1.0/24', { '10.0.2.5': T0, '10.0.2.4': T0 })];
  const now = Date.parse(T1) + 60_000;
  t.same(
    staleHandOvers(records, { '10.0.2.5': 'b' }, peers, new Set(['10.0.2.8']), now, 120_000).map((h) => h.ip),
    ['10.0.2.5', '10.0.2.6', '10.0.2.8', '10.0.1.9'],
    'agreed, older than the keep time, back here, handed to its home node b; a fresh one and an unagreed claim’s stay',
  );
});

t.test('a lent lease is released only after its address was unused for the whole grace period', async (t) => {
  const lent = { vmA: '10.0.2.5', vmB: '10.0.2.6' };
  const first = lentToRelease({ lent, inUse: new Set(['10.0.2.5']), unhostedSinceMs: new Map(), nowMs: 1000, graceMs: 500 });
  t.same([first.release, [...first.unhostedSinceMs]], [[], [['vmB', 1000]]], 'hosted: kept; unhosted: the clock starts');
  const during = lentToRelease({
    lent,
    inUse: new Set(['10.0.2.5']),
    unhostedSinceMs: first.unhostedSinceMs,
    nowMs: 1400,
    graceMs: 500,
  });
  t.same(during.release, [], 'within the grace period');
  const hostedAgain = lentToRelease({
    lent,
    inUse: new Set(['10.0.2.5', '10.0.2.6']),
    unhostedSinceMs: during.unhostedSinceMs,
    nowMs: 1450,
    graceMs: 500,
  });
  t.same([hostedAgain.release, [...hostedAgain.unhostedSinceMs]], [[], []], 'seen hosted again: the clock stops');
  const restarted = lentToRelease({
    lent,
    inUse: new Set(['10.0.2.5']),
    unhostedSinceMs: hostedAgain.unhostedSinceMs,
    nowMs: 1600,
    graceMs: 500,
  });
  const after = lentToRelease({
    lent,
    inUse: new Set(['10.0.2.5']),
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

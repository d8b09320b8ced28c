import t from 'tap';
import type { V1Node } from '@kubernetes/client-node';
import { agreedMoves } from './moved-agreement.js';
import { peersOf } from './peer-routes.js';

const T0 = '2026-11-27T10:00:00.000Z';
/** A Node as the API serves it: its range, InternalIP and the two annotations (raw strings, as another node wrote them). */
const node = (name: string, podCIDR: string, internalIP: string, a: { hosted?: string; lent?: string } = {}): V1Node => ({
  metadata: {
    name,
    annotations: {
      ...(a.hosted !== undefined ? { 'vkvm.io/hosted-pod-ips': a.hosted } : {}),
      ...(a.lent !== undefined ? { 'vkvm.io/lent-pod-ips': a.lent } : {}),
    },
  },
  spec: { podCIDR },
  status: { addresses: [{ type: 'InternalIP', address: internalIP }] },
});
const claims = (...ips: string[]) => JSON.stringify(Object.fromEntries(ips.map((ip) => [ip, T0])));
const lends = (entries: Record<string, string>) => JSON.stringify(entries);

// h's range is 10.244.0.0/24, b's 10.244.1.0/24, c's 10.244.2.0/24; the routes are read by 'self' (10.244.9.0/24).
const H = (a?: { hosted?: string; lent?: string }) => node('h', '10.244.0.0/24', '192.0.2.1', a);
const B = (a?: { hosted?: string; lent?: string }) => node('b', '10.244.1.0/24', '192.0.2.2', a);
const C = (a?: { hosted?: string; lent?: string }) => node('c', '10.244.2.0/24', '192.0.2.3', a);
const SELF = node('self', '10.244.9.0/24', '192.0.2.9');

t.test('a peer routes a /32 to a node only when it claims the address and the address’s home lends it to that node', async (t) => {
  const cases: Array<[string, V1Node[], Record<string, { node: string; via: string; home: string }>]> = [
    ['nothing moved: nothing routed', [H(), B(), C()], {}],
    [
      'claimed by b, lent to b by its home h: via b',
      [H({ lent: lends({ '10.244.0.7': 'b' }) }), B({ hosted: claims('10.244.0.7') }), C()],
      { '10.244.0.7': { node: 'b', via: '192.0.2.2', home: 'h' } },
    ],
    ['lent but not (yet) claimed: not routed (the range route takes it home)', [H({ lent: lends({ '10.244.0.7': 'b' }) }), B(), C()], {}],
    ['claimed but not (yet) lent: not routed', [H(), B({ hosted: claims('10.244.0.7') }), C()], {}],
    [
      'hostile: c claims an address of h’s range that h lends to b; b’s claim stands, c’s is ignored',
      [H({ lent: lends({ '10.244.0.7': 'b' }) }), B({ hosted: claims('10.244.0.7') }), C({ hosted: claims('10.244.0.7') })],
      { '10.244.0.7': { node: 'b', via: '192.0.2.2', home: 'h' } },
    ],
    [
      'hostile: c claims a container pod’s address of b’s range, lent to nobody: ignored',
      [H(), B(), C({ hosted: claims('10.244.1.3') })],
      {},
    ],
    [
      'hostile: c lends h’s address to itself and claims it; c is not its home: ignored',
      [H(), B(), C({ hosted: claims('10.244.0.7'), lent: lends({ '10.244.0.7': 'c' }) })],
      {},
    ],
    [
      'hostile: b lends h’s address to c, c claims it; only h may lend it: ignored',
      [H(), B({ lent: lends({ '10.244.0.7': 'c' }) }), C({ hosted: claims('10.244.0.7') })],
      {},
    ],
    [
      'a claim of the claimer’s own range (lent to itself too): ignored, its range route goes there anyway',
      [H(), B(), C({ hosted: claims('10.244.2.5'), lent: lends({ '10.244.2.5': 'c' }) })],
      {},
    ],
    ['a claim of an address in no node’s range: ignored (no home to agree)', [H(), B({ hosted: claims('10.99.0.5') }), C()], {}],
    [
      'two nodes whose ranges both hold the address: no single home, ignored',
      [
        H({ lent: lends({ '10.244.0.7': 'b' }) }),
        B({ hosted: claims('10.244.0.7') }),
        node('x', '10.244.0.0/16', '192.0.2.7', { lent: lends({ '10.244.0.7': 'b' }) }),
      ],
      {},
    ],
    [
      'a chain move h→b→c: h lends to c, b still claims (not handed on yet), c claims: via c',
      [H({ lent: lends({ '10.244.0.7': 'c' }) }), B({ hosted: claims('10.244.0.7') }), C({ hosted: claims('10.244.0.7') })],
      { '10.244.0.7': { node: 'c', via: '192.0.2.3', home: 'h' } },
    ],
    [
      'malformed annotations: junk entries dropped, junk documents ignored, the well-formed entry still agrees',
      [
        H({ lent: '{"10.244.0.7":"b","10.244.0.8":"Not_A_Node","10.244.0.9":7,"300.1.1.1":"b","10.244.0.10 x":"b"}' }),
        B({ hosted: `{"10.244.0.7":"${T0}","10.244.0.8":"${T0}","10.244.0.9":"${T0}","10.244.0.11":"yesterday"}` }),
        C({ hosted: 'not json', lent: '["10.244.2.1"]' }),
      ],
      { '10.244.0.7': { node: 'b', via: '192.0.2.2', home: 'h' } },
    ],
  ];
  for (const [name, nodes, want] of cases) t.same(Object.fromEntries(agreedMoves(peersOf([SELF, ...nodes], 'self'))), want, name);
});

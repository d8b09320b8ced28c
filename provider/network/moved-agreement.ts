// Where every vkvm node routes a migrated VM's address: a /32 of home node
// H's range goes to node T only when two parties agree. T claims it (its
// Node's vkvm.io/hosted-pod-ips) and H lends it to T (H's Node's
// vkvm.io/lent-pod-ips). H is the authority on its own range, and decides
// from what it holds itself and from the VMI, which nodes cannot move
// (provider/migration/lending.ts). A node's claim alone attracts nothing, so
// a compromised or buggy node cannot pull another node's pod addresses to
// itself; a claim's time is only informational.
import { contains, parseIpv4Range, type Ipv4Range } from './ipv4.js';
import type { PeerNode } from './peer-routes.js';

/** Where an address is routed: the node that claims it, lent by its home. */
export interface AgreedMove {
  /** The claiming node, and its InternalIP (the next hop). */
  node: string;
  via: string;
  /** The node whose range holds the address, which lent it. */
  home: string;
}

/**
 * ip → where it is routed, from every node's range, claims and lendings
 * (the peers and this node alike). Pure. Ignored: a claim its home does not
 * lend to the claimer, a lending by a node that is not the address's home, a
 * claim of the claimer's own range (its range is routed to it anyway), and
 * an address in more than one node's range or in none (no single home to
 * ask). A home lends an address to one node, so at most one claim agrees.
 */
export function agreedMoves(nodes: readonly PeerNode[]): Map<string, AgreedMove> {
  const ranges: Array<{ node: PeerNode; range: Ipv4Range }> = nodes.flatMap((node) => {
    try {
      return [{ node, range: parseIpv4Range(node.podCidr, 'podCIDR') }];
    } catch {
      return [];
    }
  });
  const homeOf = (ip: string): PeerNode | undefined => {
    const holders = ranges.filter((r) => contains(r.range, ip));
    return holders.length === 1 ? holders[0]!.node : undefined;
  };
  const agreed = new Map<string, AgreedMove>();
  for (const claimer of nodes) {
    for (const ip of Object.keys(claimer.hosted ?? {})) {
      const home = homeOf(ip);
      if (!home || home.name === claimer.name || home.lent?.[ip] !== claimer.name) continue;
      agreed.set(ip, { node: claimer.name, via: claimer.internalIP, home: home.name });
    }
  }
  return agreed;
}

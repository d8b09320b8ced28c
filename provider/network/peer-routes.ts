// Routes to other nodes' pod ranges, so VMs on different nodes reach each
// other by pod IP without NAT: each peer's Node.spec.podCIDR via its
// InternalIP, as flannel's host-gw backend and kubenet with cloud routes do.
// That needs the peers on a network this host reaches directly (the next hop
// is a neighbour); a peer that is not is reported and skipped. Only routes
// this agent added (kept in the node record) are ever replaced or removed.
import type { V1Node } from '@kubernetes/client-node';
import type { Logger } from '../log.js';
import { run, setNetSysctl } from './host.js';
import { parseIpv4Range } from './ipv4.js';

/** Another node whose pod range is routed through its address. */
export interface PeerNode {
  name: string;
  /** Its IPv4 pod range, normalized. */
  podCidr: string;
  /** Its InternalIP: the next hop. */
  internalIP: string;
}

/** A route this agent added. */
export interface PeerRoute {
  cidr: string;
  via: string;
}

/** The other Nodes with an IPv4 pod range and an IPv4 InternalIP. Pure. */
export function peersOf(nodes: readonly V1Node[], self: string): PeerNode[] {
  return nodes.flatMap((n) => {
    const name = n.metadata?.name;
    const cidr = (n.spec?.podCIDRs ?? [n.spec?.podCIDR]).find((c) => c && !c.includes(':'));
    const internalIP = n.status?.addresses?.find((a) => a.type === 'InternalIP' && !a.address.includes(':'))?.address;
    if (!name || name === self || !cidr || !internalIP) return [];
    try {
      return [{ name, podCidr: parseIpv4Range(cidr, 'podCIDR').cidr, internalIP }];
    } catch {
      return [];
    }
  });
}

interface IpRoute {
  dst: string;
  gateway?: string;
  dev?: string;
}

async function routeTo(cidr: string): Promise<IpRoute | undefined> {
  const out = await run(['ip', '-j', '-4', 'route', 'show', 'exact', cidr]);
  return (JSON.parse(out || '[]') as IpRoute[])[0];
}

async function localAddresses(): Promise<Set<string>> {
  const out = await run(['ip', '-j', '-4', 'addr', 'show']);
  const parsed = JSON.parse(out || '[]') as Array<{ addr_info?: Array<{ local: string }> }>;
  return new Set(parsed.flatMap((l) => (l.addr_info ?? []).map((a) => a.local)));
}

/**
 * Makes the routes to `peers` exist, and those of `previous` that no peer
 * wants any more go. Returns what is now this agent's (to record). Peers on
 * this very host (their address is one of ours: their bridge route is local
 * already), peers whose range has a route that is not ours, and unreachable
 * next hops are skipped with a warning, once per change (`warned`).
 */
export async function ensurePeerRoutes(peers: readonly PeerNode[], previous: readonly PeerRoute[], ownCidr: string, log: Logger, warned: Set<string>): Promise<PeerRoute[]> {
  const local = await localAddresses();
  const ours = new Map(previous.map((r) => [r.cidr, r.via]));
  const next: PeerRoute[] = [];
  const skip = (peer: PeerNode, why: string) => {
    const key = `${peer.name} ${peer.podCidr} ${peer.internalIP} ${why}`;
    if (!warned.has(key)) log.warn({ peer: peer.name, podCidr: peer.podCidr, via: peer.internalIP }, `no route to the peer's pods: ${why}`);
    warned.add(key);
  };
  for (const peer of peers) {
    if (peer.podCidr === ownCidr) skip(peer, "its pod range is this node's own");
    else if (local.has(peer.internalIP)) continue;
    else {
      const existing = await routeTo(peer.podCidr);
      if (existing && !ours.has(peer.podCidr)) skip(peer, `${peer.podCidr} is already routed (${existing.gateway ? `via ${existing.gateway}` : `dev ${existing.dev}`}) by someone else`);
      else {
        try {
          if (existing?.gateway !== peer.internalIP) await run(['ip', 'route', 'replace', peer.podCidr, 'via', peer.internalIP]);
          next.push({ cidr: peer.podCidr, via: peer.internalIP });
          // Packets from the peer's pods enter on this device: forwarding is decided per entering interface.
          const dev = (JSON.parse(await run(['ip', '-j', '-4', 'route', 'get', peer.internalIP])) as IpRoute[])[0]?.dev;
          if (dev) await setNetSysctl(`net.ipv4.conf.${dev}.forwarding`, '1');
          if (!existing) log.info({ peer: peer.name, podCidr: peer.podCidr, via: peer.internalIP }, 'routed a peer node’s pod range');
        } catch (err) {
          skip(peer, `${peer.internalIP} is not a directly reachable next hop (${(err as Error).message.trim()})`);
        }
      }
    }
  }
  for (const old of previous) {
    if (next.some((r) => r.cidr === old.cidr)) continue;
    await run(['ip', 'route', 'del', old.cidr, 'via', old.via]).catch(() => undefined);
    log.info({ podCidr: old.cidr, via: old.via }, 'removed the route to a peer node’s pod range');
  }
  return next;
}

/** Removes routes this agent added (reset, vkvm up's stop). */
export async function removePeerRoutes(routes: readonly PeerRoute[]): Promise<void> {
  for (const r of routes) await run(['ip', 'route', 'del', r.cidr, 'via', r.via]).catch(() => undefined);
}

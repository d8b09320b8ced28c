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
import {
  HOSTED_POD_IPS_ANNOTATION,
  LENT_POD_IPS_ANNOTATION,
  parseHostedPodIps,
  parseLentPodIps,
  type HostedPodIps,
  type LentPodIps,
} from './hosted-annotation.js';

/** Another node whose pod range is routed through its address. */
export interface PeerNode {
  name: string;
  /** Its IPv4 pod range, normalized. */
  podCidr: string;
  /** Its InternalIP: the next hop. */
  internalIP: string;
  /** Addresses of other ranges whose migrated VMs it says it runs (its HOSTED_POD_IPS_ANNOTATION): its claims. */
  hosted?: HostedPodIps;
  /** Addresses of its own range it lends to other nodes (its LENT_POD_IPS_ANNOTATION): a claim is routed only when lent. */
  lent?: LentPodIps;
}

/** A route this agent added. */
export interface PeerRoute {
  cidr: string;
  via: string;
}

/** A Node's IPv4 pod range as allocated (dual-stack nodes list both families; vkvm's pod network is IPv4). */
export function ipv4PodCidrOf(spec: V1Node['spec']): string | undefined {
  return (spec?.podCIDRs ?? [spec?.podCIDR]).find((c): c is string => typeof c === 'string' && !c.includes(':'));
}

/** The other Nodes with an IPv4 pod range and an IPv4 InternalIP. Pure. */
export function peersOf(nodes: readonly V1Node[], self: string): PeerNode[] {
  return nodes.flatMap((n) => {
    const name = n.metadata?.name;
    const cidr = ipv4PodCidrOf(n.spec);
    const internalIP = n.status?.addresses?.find((a) => a.type === 'InternalIP' && !a.address.includes(':'))?.address;
    if (!name || name === self || !cidr || !internalIP) return [];
    try {
      const hosted = parseHostedPodIps(n.metadata?.annotations?.[HOSTED_POD_IPS_ANNOTATION]);
      const lent = parseLentPodIps(n.metadata?.annotations?.[LENT_POD_IPS_ANNOTATION]);
      return [
        {
          name,
          podCidr: parseIpv4Range(cidr, 'podCIDR').cidr,
          internalIP,
          ...(Object.keys(hosted).length ? { hosted } : {}),
          ...(Object.keys(lent).length ? { lent } : {}),
        },
      ];
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

/** The host's IPv4 routes by destination, read once per pass rather than once per peer. */
async function routesByDestination(): Promise<Map<string, IpRoute>> {
  const out = await run(['ip', '-j', '-4', 'route', 'show']);
  return new Map((JSON.parse(out || '[]') as IpRoute[]).map((r) => [r.dst, r]));
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
export async function ensurePeerRoutes(
  peers: readonly PeerNode[],
  previous: readonly PeerRoute[],
  ownCidr: string,
  log: Logger,
  warned: Set<string>,
): Promise<PeerRoute[]> {
  const local = await localAddresses();
  const routes = await routesByDestination();
  const ours = new Map(previous.map((r) => [r.cidr, r.via]));
  const next: PeerRoute[] = [];
  const skip = (peer: PeerNode, why: string) => {
    const key = `${peer.name} ${peer.podCidr} ${peer.internalIP} ${why}`;
    if (!warned.has(key)) log.warn({ peer: peer.name, podCidr: peer.podCidr, via: peer.internalIP }, `no route to the peer's pods: ${why}`);
    warned.add(key);
  };
  for (const peer of peers) {
    if (peer.podCidr === ownCidr) {
      skip(peer, "its pod range is this node's own");
      continue;
    }
    if (local.has(peer.internalIP)) continue;
    const existing = routes.get(peer.podCidr);
    if (existing && !ours.has(peer.podCidr)) {
      skip(
        peer,
        `${peer.podCidr} is already routed (${existing.gateway ? `via ${existing.gateway}` : `dev ${existing.dev}`}) by someone else`,
      );
      continue;
    }
    try {
      if (existing?.gateway !== peer.internalIP) await run(['ip', 'route', 'replace', peer.podCidr, 'via', peer.internalIP]);
      next.push({ cidr: peer.podCidr, via: peer.internalIP });
      if (!existing) log.info({ peer: peer.name, podCidr: peer.podCidr, via: peer.internalIP }, 'routed a peer node’s pod range');
    } catch (err) {
      skip(peer, `${peer.internalIP} is not a directly reachable next hop (${(err as Error).message.trim()})`);
    }
  }
  // Packets from peers' pods enter on the devices their routes leave by: forwarding is decided per entering interface.
  const after = next.length ? await routesByDestination() : new Map<string, IpRoute>();
  const devices = new Set(next.flatMap((r) => after.get(r.cidr)?.dev ?? []));
  for (const dev of devices) await setNetSysctl(`net.ipv4.conf.${dev}.forwarding`, '1');
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

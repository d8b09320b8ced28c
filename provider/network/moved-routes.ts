// Where a migrated VM's address is routed (docs/design/live-migration.md §6).
// A VM keeps its pod address when it moves to another node, so the address
// leaves its home node's range: the node hosting it routes it to its bridge
// as a /32 and tells the others through its Node's annotation, and every
// other vkvm node routes that /32 via the hosting node's InternalIP; a /32
// beats the home node's range. The node the VM left routes it via the new
// node at once, before the others have read the annotation. This file is the
// plan (pure) and the routes' I/O; moved-address.ts keeps the records.
import type { Logger } from '../log.js';
import { run } from './host.js';
import { contains, parseIpv4Range } from './ipv4.js';
import type { HostedPodIps } from './hosted-annotation.js';
import type { PeerNode } from './peer-routes.js';

/** A moved VM this node runs, since it claimed the address. */
export interface HostedHere {
  ip: string;
  claimedAt: string;
}

/** An address this node handed over to the node its VM moved to. */
export interface HandedOver {
  ip: string;
  node: string;
  /** That node's InternalIP. */
  via: string;
  at: string;
}

/** A /32 this agent routes: to its bridge (`dev`) or via another node. */
export type MovedRoute = { ip: string; via: string } | { ip: string; dev: string };

export interface MovedPlan {
  routes: MovedRoute[];
  /** What this node publishes (HOSTED_POD_IPS_ANNOTATION). */
  hosted: HostedPodIps;
  /** Addresses forwarded on to another node: let through (the hosting node filters what reaches its VM). */
  forwarded: string[];
  /** Addresses of other ranges whose VMs run here: their traffic leaving the cluster is NATed as this node's pods'. */
  natted: string[];
}

/**
 * The /32 routes and the annotation (pure). `local`: addresses VM ports on
 * this node hold now (its own pods' and moved ones'): never routed away.
 * A peer's annotation beats a handed-over record (the VM may have moved on
 * again); among peers the latest taker wins.
 */
export function planMovedRoutes(o: {
  ownCidr: string;
  bridge: string;
  hostedHere: readonly HostedHere[];
  handedOver: readonly HandedOver[];
  peers: readonly PeerNode[];
  local: ReadonlySet<string>;
}): MovedPlan {
  const own = parseIpv4Range(o.ownCidr, 'the node pod range');
  const away = new Map<string, { via: string; at: string; name: string }>();
  for (const peer of o.peers) {
    for (const [ip, at] of Object.entries(peer.hosted ?? {})) {
      if (o.local.has(ip)) continue;
      const seen = away.get(ip);
      if (!seen || at > seen.at || (at === seen.at && peer.name < seen.name)) away.set(ip, { via: peer.internalIP, at, name: peer.name });
    }
  }
  for (const h of o.handedOver) if (!o.local.has(h.ip) && !away.has(h.ip)) away.set(h.ip, { via: h.via, at: h.at, name: h.node });
  // Back home, an address is on the bridge's own range: its /32 still beats a route away others may have left.
  const hostedHere = o.hostedHere.filter((h) => !contains(own, h.ip));
  const byIp = (a: { ip: string }, b: { ip: string }) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);
  const routes: MovedRoute[] = [
    ...o.hostedHere.map((h) => ({ ip: h.ip, dev: o.bridge })),
    ...[...away].map(([ip, a]) => ({ ip, via: a.via })),
  ].sort(byIp);
  return {
    routes,
    hosted: Object.fromEntries(hostedHere.map((h) => [h.ip, h.claimedAt])),
    forwarded: [...away.keys()].sort(),
    natted: hostedHere.map((h) => h.ip).sort(),
  };
}

/**
 * Handed-over records no longer needed (pure): a peer's annotation routes the
 * address, it is back on this node (`local`) or on its home node (whose range
 * is routed there), or `keepMs` passed (nothing hosts it).
 */
export function staleHandOvers<T extends HandedOver>(
  records: readonly T[],
  peers: readonly PeerNode[],
  local: ReadonlySet<string>,
  nowMs: number,
  keepMs: number,
): T[] {
  const hosted = new Set(peers.flatMap((p) => Object.keys(p.hosted ?? {})));
  // Handed to its home node: that node's range is routed there anyway.
  const home = (r: HandedOver) => peers.some((p) => p.name === r.node && contains(parseIpv4Range(p.podCidr, 'podCIDR'), r.ip));
  return records.filter((r) => hosted.has(r.ip) || local.has(r.ip) || home(r) || nowMs - Date.parse(r.at) > keepMs);
}

/**
 * Lent leases to release (pure): an address no node hosts, no VM port here
 * holds and no handed-over record routes, for `graceMs` running. Returns the
 * owners to release and when each still-lent address was first seen unhosted.
 */
export function lentToRelease(o: {
  lent: Readonly<Record<string, string>>;
  hostedSomewhere: ReadonlySet<string>;
  unhostedSinceMs: ReadonlyMap<string, number>;
  nowMs: number;
  graceMs: number;
}): { release: string[]; unhostedSinceMs: Map<string, number> } {
  const release: string[] = [];
  const since = new Map<string, number>();
  for (const [owner, ip] of Object.entries(o.lent)) {
    if (o.hostedSomewhere.has(ip)) continue;
    const first = o.unhostedSinceMs.get(owner) ?? o.nowMs;
    if (o.nowMs - first >= o.graceMs) release.push(owner);
    else since.set(owner, first);
  }
  return { release: release.sort(), unhostedSinceMs: since };
}

interface IpRoute {
  dst: string;
  gateway?: string;
  dev?: string;
}

const sameRoute = (want: MovedRoute, have: IpRoute | undefined) =>
  !!have && ('via' in want ? have.gateway === want.via : have.dev === want.dev && !have.gateway);

const routeArgs = (r: MovedRoute) => ['ip', 'route', 'replace', `${r.ip}/32`, ...('via' in r ? ['via', r.via] : ['dev', r.dev])];

/**
 * Makes the /32s of `desired` exist, and those of `previous` no longer
 * desired go (only while they are still as this agent set them). Returns
 * what is now this agent's, to record. A next hop that is one of this host's
 * own addresses (a peer on this very host) or unreachable is skipped and
 * logged; the others are still applied.
 */
export async function applyMovedRoutes(
  desired: readonly MovedRoute[],
  previous: readonly MovedRoute[],
  log: Logger,
): Promise<MovedRoute[]> {
  const routes = new Map(
    (JSON.parse((await run(['ip', '-j', '-4', 'route', 'show'])) || '[]') as IpRoute[]).map((r) => [r.dst.replace(/\/32$/, ''), r]),
  );
  const applied: MovedRoute[] = [];
  for (const r of desired) {
    try {
      if (!sameRoute(r, routes.get(r.ip))) await run(routeArgs(r));
      applied.push(r);
    } catch (err) {
      log.warn({ err, route: r }, 'could not route a moved VM’s address; the next repair retries');
    }
  }
  for (const old of previous) {
    if (applied.some((r) => r.ip === old.ip)) continue;
    if (sameRoute(old, routes.get(old.ip)) || 'dev' in old)
      await run(['ip', 'route', 'del', `${old.ip}/32`, ...('via' in old ? ['via', old.via] : ['dev', old.dev])]).catch(() => undefined);
  }
  return applied;
}

/** Removes the /32s this agent added (reset, vkvm up's stop). */
export async function removeMovedRoutes(routes: readonly MovedRoute[]): Promise<void> {
  for (const r of routes)
    await run(['ip', 'route', 'del', `${r.ip}/32`, ...('via' in r ? ['via', r.via] : ['dev', r.dev])]).catch(() => undefined);
}

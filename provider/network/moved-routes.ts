// Where a migrated VM's address is routed (docs/design/live-migration.md §6).
// A VM keeps its pod address when it moves to another node, so the address
// leaves its home node's range: the node hosting it routes it to its bridge
// as a /32 and claims it in its Node's annotation; its home node lends it to
// that node in its own; every vkvm node routes the /32 via the hosting node's
// InternalIP once both agree (moved-agreement.ts); a /32 beats the home
// node's range. Until they agree, the range's route takes the traffic to the
// home node, which routes the /32 via the node it lends to, and the node the
// VM left routes it via the new node at once. This file is the plan (pure)
// and the routes' I/O; moved-address.ts keeps the records.
import type { Logger } from '../log.js';
import { run } from './host.js';
import { contains, parseIpv4Range } from './ipv4.js';
import type { HostedPodIps, LentPodIps } from './hosted-annotation.js';
import { agreedMoves } from './moved-agreement.js';
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
  /** What this node publishes as its claims (HOSTED_POD_IPS_ANNOTATION). */
  hosted: HostedPodIps;
  /** Addresses forwarded on to another node: let through (the hosting node filters what reaches its VM). */
  forwarded: string[];
  /** Addresses of other ranges whose VMs run here: their traffic leaving the cluster is NATed as this node's pods'. */
  natted: string[];
  /** Addresses whose claim its home agrees to, with the claimer: where every node routes them. */
  agreed: Record<string, string>;
}

/**
 * The /32 routes and the claims (pure). `local`: addresses VM ports on this
 * node hold now (its own pods' and moved ones'): never routed away.
 * `lending`: what this node lends of its own range; `confirmed`: those of
 * them whose VMI says the VM runs on the node lent to. An agreed claim comes
 * first; then, for its own range, a confirmed lending, claimed or not yet
 * (a chain move's hand-over: the node it lends to forwards to the next);
 * then a handed-over record (the VM left here, and nobody agrees on a new
 * place yet).
 */
export function planMovedRoutes(o: {
  self: string;
  ownCidr: string;
  bridge: string;
  hostedHere: readonly HostedHere[];
  lending: LentPodIps;
  confirmed: ReadonlySet<string>;
  handedOver: readonly HandedOver[];
  peers: readonly PeerNode[];
  local: ReadonlySet<string>;
}): MovedPlan {
  const own = parseIpv4Range(o.ownCidr, 'the node pod range');
  // Back home, an address is on the bridge's own range: its /32 still beats a route away others may have left.
  const hostedHere = o.hostedHere.filter((h) => !contains(own, h.ip));
  const hosted = Object.fromEntries(hostedHere.map((h) => [h.ip, h.claimedAt]));
  const agreed = agreedMoves([...o.peers, { name: o.self, podCidr: own.cidr, internalIP: '', hosted, lent: o.lending }]);
  const away = new Map<string, string>();
  for (const [ip, m] of agreed) if (m.node !== o.self && !o.local.has(ip)) away.set(ip, m.via);
  for (const [ip, node] of Object.entries(o.lending)) {
    if (!o.confirmed.has(ip)) continue;
    const to = o.peers.find((p) => p.name === node);
    if (to && contains(own, ip) && !o.local.has(ip) && !away.has(ip)) away.set(ip, to.internalIP);
  }
  for (const h of o.handedOver) if (!o.local.has(h.ip) && !away.has(h.ip)) away.set(h.ip, h.via);
  const byIp = (a: { ip: string }, b: { ip: string }) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);
  const routes: MovedRoute[] = [
    ...o.hostedHere.map((h) => ({ ip: h.ip, dev: o.bridge })),
    ...[...away].map(([ip, via]) => ({ ip, via })),
  ].sort(byIp);
  return {
    routes,
    hosted,
    forwarded: [...away.keys()].sort(),
    natted: hostedHere.map((h) => h.ip).sort(),
    agreed: Object.fromEntries([...agreed].map(([ip, m]) => [ip, m.node])),
  };
}

/**
 * Handed-over records no longer needed (pure): an agreed claim routes the
 * address (`agreed`), it is back on this node (`local`) or on its home node
 * (whose range is routed there), or `keepMs` passed (nothing hosts it).
 */
export function staleHandOvers<T extends HandedOver>(
  records: readonly T[],
  agreed: Readonly<Record<string, string>>,
  peers: readonly PeerNode[],
  local: ReadonlySet<string>,
  nowMs: number,
  keepMs: number,
): T[] {
  // Handed to its home node: that node's range is routed there anyway.
  const home = (r: HandedOver) => peers.some((p) => p.name === r.node && contains(parseIpv4Range(p.podCidr, 'podCIDR'), r.ip));
  return records.filter((r) => r.ip in agreed || local.has(r.ip) || home(r) || nowMs - Date.parse(r.at) > keepMs);
}

/**
 * Lent leases to release (pure): an address not `inUse` (lent, and hosted
 * by the node it is lent to, on this node, or routed by a handed-over
 * record) for `graceMs` running. Returns the owners to release and when each
 * still-lent address was first seen unused.
 */
export function lentToRelease(o: {
  lent: Readonly<Record<string, string>>;
  inUse: ReadonlySet<string>;
  unhostedSinceMs: ReadonlyMap<string, number>;
  nowMs: number;
  graceMs: number;
}): { release: string[]; unhostedSinceMs: Map<string, number> } {
  const release: string[] = [];
  const since = new Map<string, number>();
  for (const [owner, ip] of Object.entries(o.lent)) {
    if (o.inUse.has(ip)) continue;
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

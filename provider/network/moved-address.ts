// A migrating VM keeps its pod address (docs/design/live-migration.md §6).
// The target node attaches the VM in adopt mode, for an address of its home
// node's range (attachIncoming), and claims it when the VM is about to run
// there (claimMovedAddress): a /32 to its bridge, a neighbour entry, then the
// address published as hosted (hosted-annotation.ts, moved-routes.ts). The
// node the VM left routes the address via the new node and drops the VM's
// port (handOverAddress); its home node keeps the lease, lent, and publishes
// to which node it lends it (where its VMI says the VM runs: LendingSource),
// until the VM runs nowhere. Other nodes route a claim only when the home
// lends it (moved-agreement.ts). What this file keeps are the records those
// steps leave, so that every repair can rebuild the routes from them after a
// crash:
//   <vm dir>/incoming.json      a VM attached here for another node's address
//   handed-over/<ip>.json       an address this node routes to where its VM went
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { writeAtomic } from '../atomic-file.js';
import type { Logger } from '../log.js';
import { ipBatch, ipBatchRemoval, run } from './host.js';
import type { Ipam, LentLease, LentVmi } from './ipam.js';
import { contains, gatewayOf, parseIpv4Range, type Ipv4Range } from './ipv4.js';
import { renderHostedPodIps, renderLentPodIps, type HostedPodIps, type LentPodIps } from './hosted-annotation.js';
import { lentToRelease, planMovedRoutes, staleHandOvers, type HandedOver, type MovedPlan } from './moved-routes.js';
import type { MovedNetwork } from './node-network.js';
import type { PeerNode } from './peer-routes.js';
import type { VmPort } from './port-filter.js';

/** Where a migrating VM's address lives: its home node's pod range and gateway. */
export interface LentAddress {
  podIP: string;
  homeCidr: string;
}

/** A VM attached here for an address it brought along. */
export interface IncomingRecord extends LentAddress {
  /** When this node took the address (claimMovedAddress). */
  claimedAt?: string;
  /** When this node handed it on to the next node the VM moved to. */
  handedOverAt?: string;
}

const INCOMING_FILE = 'incoming.json';
/** How long a lent address must be hosted nowhere before its lease is released (on top of the 30 s sweep). */
const LENT_RELEASE_GRACE_MS = 120_000;
/** How long a handed-over route stays when no node says it hosts the address. */
const HANDED_OVER_KEEP_MS = 120_000;

/** What a node publishes for moved addresses: its claims, and its lendings of its own range. */
export interface MovedClaims {
  hosted: HostedPodIps;
  lent: LentPodIps;
}

/** Where the VMs of lent addresses run now (provider/migration/lent-vmis.ts). */
export interface LendingSource {
  /** Follows the VMIs these leases name, and no others. */
  follow(lent: Readonly<Record<string, LentLease>>): void;
  /** The node the lease's VM runs on; null: nowhere (its VMI is gone or finished); undefined: not known (yet). */
  whereIs(lease: LentLease): string | null | undefined;
}

/** The node's pod range and its leases. */
export interface NodeAddresses {
  range: Ipv4Range;
  ipam: Ipam;
}
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/**
 * The address and home range of an incoming VM, checked (pure). The home is
 * the range that holds the address: this node's, else `lent.homeCidr`, else
 * a peer's (a VM that moved on from the node it first moved to brings that
 * node's range as the hint, not its home's). The address must be a VM
 * address of it, and a home other than this node's must not overlap this
 * node's range. Errors name the field.
 */
export function checkLentAddress(
  lent: LentAddress,
  own: Ipv4Range,
  peerCidrs: readonly string[] = [],
): { podIP: string; range: Ipv4Range; home: boolean } {
  if (!IPV4.test(lent.podIP)) throw new Error(`lent.podIP: ${JSON.stringify(lent.podIP)} is not an IPv4 address`);
  const hint = parseIpv4Range(lent.homeCidr, 'lent.homeCidr');
  const holds = (r: Ipv4Range) => contains(r, lent.podIP) && lent.podIP !== gatewayOf(r);
  const candidates = [own, hint, ...peerCidrs.flatMap((c) => (c === hint.cidr ? [] : [parseIpv4Range(c, 'a peer’s podCIDR')]))];
  const range = candidates.find(holds);
  if (!range) throw new Error(`lent.podIP: ${lent.podIP} is not a VM address of ${hint.cidr} (lent.homeCidr) nor of any node's pod range`);
  const home = range.cidr === own.cidr;
  if (!home && contains(range, gatewayOf(own))) throw new Error(`lent.homeCidr: ${range.cidr} overlaps this node's pod range ${own.cidr}`);
  return { podIP: lent.podIP, range, home };
}

export class MovedAddresses {
  private readonly handedOverDir: string;
  /** Lent leases' owners, with when their address was first seen unused. */
  private unhostedSinceMs = new Map<string, number>();
  /** The annotation value last published; undefined until the first publication succeeds. */
  private published: string | undefined;

  constructor(
    private readonly o: {
      /** This node's name: the claims and lendings name nodes. */
      nodeName: string;
      dir: string;
      bridge: string;
      vmDir: (uid: string) => string;
      /** The other nodes (their ranges: where a brought-along address is at home). */
      peers: () => readonly PeerNode[];
      /** The VMs' port records. */
      ports: () => Promise<Array<{ uid: string; port: VmPort }>>;
      /** Writes this node's HOSTED_POD_IPS_ANNOTATION and LENT_POD_IPS_ANNOTATION; none: a node alone, nobody to tell. */
      publish?: (claims: MovedClaims) => Promise<void>;
      /** Where lent addresses' VMs run; none: each stays lent to the node it was handed over to. */
      lending?: LendingSource;
      log: Logger;
    },
  ) {
    this.handedOverDir = path.join(o.dir, 'handed-over');
  }

  async incoming(uid: string): Promise<IncomingRecord | undefined> {
    const text = await readFile(path.join(this.o.vmDir(uid), INCOMING_FILE), 'utf8').catch(() => undefined);
    return text ? (JSON.parse(text) as IncomingRecord) : undefined;
  }

  async writeIncoming(uid: string, record: IncomingRecord): Promise<void> {
    await mkdir(this.o.vmDir(uid), { recursive: true, mode: 0o700 });
    await writeAtomic(path.join(this.o.vmDir(uid), INCOMING_FILE), JSON.stringify(record), 0o600);
  }

  /** Every VM attached here for a brought-along address, by uid. */
  async allIncoming(): Promise<Array<{ uid: string; record: IncomingRecord }>> {
    const uids = await readdir(path.join(this.o.dir, 'vms')).catch(() => [] as string[]);
    const found = await Promise.all(uids.map(async (uid) => ({ uid, record: await this.incoming(uid) })));
    return found.filter((f): f is { uid: string; record: IncomingRecord } => f.record !== undefined);
  }

  async handedOver(): Promise<Array<HandedOver & { uid: string }>> {
    const files = await readdir(this.handedOverDir).catch(() => [] as string[]);
    const records = await Promise.all(
      files.map((f) =>
        readFile(path.join(this.handedOverDir, f), 'utf8').then(
          (t) => JSON.parse(t) as HandedOver & { uid: string },
          () => undefined,
        ),
      ),
    );
    return records.filter((r): r is HandedOver & { uid: string } => r !== undefined);
  }

  async recordHandOver(h: HandedOver & { uid: string }): Promise<void> {
    await mkdir(this.handedOverDir, { recursive: true, mode: 0o700 });
    await writeAtomic(path.join(this.handedOverDir, `${h.ip}.json`), JSON.stringify(h), 0o600);
  }

  async dropHandOver(ip: string): Promise<void> {
    await rm(path.join(this.handedOverDir, `${ip}.json`), { force: true });
  }

  /**
   * Routes `ip` to the bridge and tells the node the VM's MAC, in one
   * process: the first packets after the VM resumes need no ARP round.
   */
  async routeHere(ip: string, mac: string): Promise<void> {
    await ipBatch([
      ['route', 'replace', `${ip}/32`, 'dev', this.o.bridge],
      ['neigh', 'replace', ip, 'lladdr', mac, 'dev', this.o.bridge, 'nud', 'reachable'],
    ]);
  }

  /** Routes `ip` via the node its VM moved to, at once (the repair records it). */
  async routeAway(ip: string, via: string): Promise<void> {
    await run(['ip', 'route', 'replace', `${ip}/32`, 'via', via]);
  }

  /** Drops the VM's port from the bridge (the host end of its veth); its namespace stays until detach. */
  async dropPort(hostVeth: string): Promise<void> {
    await ipBatchRemoval([['link', 'del', hostVeth]], /Cannot find device/);
  }

  /**
   * The address an incoming VM brought (recorded at its first attach, so
   * later ones keep it), checked against this node's range and VMs; undefined
   * for an ordinary VM. A VM whose address was handed on is not attached again.
   */
  async adoptedAddress(
    uid: string,
    lent: LentAddress | undefined,
    n: NodeAddresses,
  ): Promise<{ podIP: string; range: Ipv4Range } | undefined> {
    const recorded = await this.incoming(uid);
    const handedTo = n.ipam.lent()[uid]?.node ?? (recorded?.handedOverAt ? 'another node' : undefined);
    if (handedTo) throw new Error(`the address of VM ${uid} was handed over to ${handedTo}; it is not attached here again`);
    const given = recorded ?? lent;
    if (!given) return undefined;
    if (recorded && lent && recorded.podIP !== lent.podIP)
      throw new Error(`lent.podIP: VM ${uid} was attached here for ${recorded.podIP}, not ${lent.podIP}`);
    const { podIP, range, home } = checkLentAddress(
      given,
      n.range,
      this.o.peers().map((p) => p.podCidr),
    );
    const lentOut = n.ipam.lent();
    const holder = Object.entries(n.ipam.leases()).find(([o, ip]) => ip === podIP && o !== uid && !lentOut[o]);
    const port = (await this.o.ports()).find((p) => p.uid !== uid && p.port.ip === podIP);
    if ((home && holder) || port) throw new Error(`lent.podIP: ${podIP} is held by another VM on this node`);
    if (!recorded) await this.writeIncoming(uid, { podIP, homeCidr: range.cidr });
    return { podIP, range };
  }

  /** claimMovedAddress: the /32 and neighbour entry; back home, the lent lease becomes the VM's own. */
  async claim(uid: string, n: NodeAddresses): Promise<void> {
    const record = await this.incoming(uid);
    const port = (await this.o.ports()).find((p) => p.uid === uid)?.port;
    if (!record || !port) throw new Error(`VM ${uid} was not attached here with attachIncoming`);
    if (record.handedOverAt) throw new Error(`the address of VM ${uid} was handed over already`);
    await this.routeHere(record.podIP, port.mac);
    if (record.homeCidr === n.range.cidr) await n.ipam.adopt(uid, record.podIP);
    if (!record.claimedAt) await this.writeIncoming(uid, { ...record, claimedAt: new Date().toISOString() });
  }

  /**
   * handOverAddress: the route via the new node first, then the lease lent
   * (home) or the record marked (a node the VM had moved to), then the port
   * dropped (`forgetPort`: its record, filter chain, MAC claim, DHCP entry).
   */
  async handOver(
    uid: string,
    to: { node: string; address: string; vmi?: LentVmi },
    n: NodeAddresses,
    forgetPort: (port: VmPort) => Promise<void>,
  ): Promise<void> {
    if (!to.node) throw new Error('to.node: empty');
    if (!IPV4.test(to.address)) throw new Error(`to.address: ${JSON.stringify(to.address)} is not an IPv4 address`);
    const port = (await this.o.ports()).find((p) => p.uid === uid)?.port;
    if (!port) {
      // Handed over already (its record may be gone since: the lease stays lent, the incoming record marked).
      if (n.ipam.lent()[uid] || (await this.incoming(uid))?.handedOverAt || (await this.handedOver()).some((h) => h.uid === uid)) return;
      throw new Error(`VM ${uid} has no port on this node to hand over`);
    }
    const at = new Date().toISOString();
    await this.recordHandOver({ uid, ip: port.ip, node: to.node, via: to.address, at });
    await this.routeAway(port.ip, to.address);
    if (n.ipam.addressOf(uid) === port.ip) await n.ipam.lend(uid, to.node, new Date(), to.vmi);
    const record = await this.incoming(uid);
    if (record) await this.writeIncoming(uid, { ...record, handedOverAt: at });
    await this.dropPort(port.veth);
    await forgetPort(port);
  }

  /** What the node does for migrated VMs' addresses, from the records, the lendings and the peers' annotations. */
  async network(n: NodeAddresses, peers: readonly PeerNode[]): Promise<MovedNetwork & { claims: MovedClaims }> {
    const { plan, incoming, lending } = await this.plan(n, peers);
    const homes = [...new Set(incoming.map((i) => i.record.homeCidr))].filter((c) => c !== n.range.cidr).sort();
    return {
      plan,
      claims: { hosted: plan.hosted, lent: lending.lent },
      homeRanges: homes.map((c) => parseIpv4Range(c, 'incoming.json homeCidr')),
    };
  }

  private async plan(n: NodeAddresses, peers: readonly PeerNode[]) {
    const incoming = (await this.allIncoming()).filter((i) => !i.record.handedOverAt);
    const local = await this.localAddresses();
    const handedOver = await this.handedOver();
    const lending = await this.lending(n);
    const plan: MovedPlan = planMovedRoutes({
      self: this.o.nodeName,
      ownCidr: n.range.cidr,
      bridge: this.o.bridge,
      hostedHere: incoming.flatMap((i) => (i.record.claimedAt ? [{ ip: i.record.podIP, claimedAt: i.record.claimedAt }] : [])),
      lending: lending.lent,
      confirmed: lending.confirmed,
      handedOver,
      peers,
      local,
    });
    return { plan, incoming, local, handedOver, lending };
  }

  /**
   * What this node lends of its range, from its lent leases and where their
   * VMs run (LendingSource; the recorded node while that is not known). A
   * lease whose VM moved on is recorded as lent to the new node, so a
   * restarted agent publishes the same before it has read the VMIs again.
   */
  private async lending(n: NodeAddresses): Promise<{ lent: LentPodIps; confirmed: Set<string>; to: Map<string, string | null> }> {
    const lent = n.ipam.lent();
    this.o.lending?.follow(lent);
    const leases = n.ipam.leases();
    const out: LentPodIps = {};
    const confirmed = new Set<string>();
    const to = new Map<string, string | null>();
    for (const [owner, lease] of Object.entries(lent)) {
      const ip = leases[owner];
      if (!ip) continue;
      const where = this.o.lending?.whereIs(lease);
      const node = where === undefined ? lease.node : where;
      to.set(owner, node);
      // Coming home (claimed here soon, the lease then adopted): lent to nobody meanwhile.
      if (node === null || node === this.o.nodeName) continue;
      if (node !== lease.node) {
        this.o.log.info({ vm: owner, ip, from: lease.node, to: node }, 'a lent address’s VM moved on: lending it to its new node');
        await n.ipam.lend(owner, node);
      }
      out[ip] = node;
      if (where !== undefined) confirmed.add(ip);
    }
    return { lent: out, confirmed, to };
  }

  /** Addresses whose VM runs on this node: every port's but those still arriving (not yet claimed). */
  private async localAddresses(): Promise<Set<string>> {
    const arriving = new Set((await this.allIncoming()).filter((i) => !i.record.claimedAt).map((i) => i.uid));
    return new Set((await this.o.ports()).filter((p) => !arriving.has(p.uid)).map((p) => p.port.ip));
  }

  /**
   * Part of the orphan sweep: lent leases no longer in use (their VMI says
   * the VM runs nowhere; without word from the VMI: the node they are lent
   * to does not claim them, no port here holds them and no handed-over
   * record routes them) are released after a grace period, and handed-over
   * records an agreed claim replaced go. True when routes and the published
   * lendings must follow (a repair).
   */
  async sweep(n: NodeAddresses, peers: readonly PeerNode[]): Promise<boolean> {
    const { plan, local, handedOver, lending } = await this.plan(n, peers);
    const stale = staleHandOvers(handedOver, plan.agreed, peers, local, Date.now(), HANDED_OVER_KEEP_MS);
    for (const h of stale) await this.dropHandOver(h.ip);
    const leases = n.ipam.leases();
    const routed = new Set(handedOver.filter((h) => !stale.includes(h)).map((h) => h.ip));
    const inUse = new Set(
      [...lending.to].flatMap(([owner, node]) => {
        const ip = leases[owner]!;
        // Its VMI says where it runs (confirmed), or else its claim, a port or a route here says it runs.
        const used =
          node !== null &&
          (node === this.o.nodeName || lending.confirmed.has(ip) || plan.agreed[ip] === node || local.has(ip) || routed.has(ip));
        return used ? [ip] : [];
      }),
    );
    const { release, unhostedSinceMs } = lentToRelease({
      lent: Object.fromEntries([...lending.to.keys()].map((owner) => [owner, leases[owner]!])),
      inUse,
      unhostedSinceMs: this.unhostedSinceMs,
      nowMs: Date.now(),
      graceMs: LENT_RELEASE_GRACE_MS,
    });
    this.unhostedSinceMs = unhostedSinceMs;
    for (const owner of release) {
      this.o.log.info({ vm: owner, ip: leases[owner] }, 'releasing a lent address whose VM runs nowhere any more');
      await n.ipam.release(owner);
    }
    return stale.length > 0 || release.length > 0;
  }

  /** Publishes the claims and lendings, unless that was the last thing published. Failures are logged; the next repair retries. */
  async publish(claims: MovedClaims): Promise<void> {
    if (!this.o.publish) return;
    const value = `${renderHostedPodIps(claims.hosted) ?? ''} ${renderLentPodIps(claims.lent) ?? ''}`;
    if (value === this.published) return;
    try {
      await this.o.publish(claims);
      this.published = value;
      this.o.log.info(
        { hosted: Object.keys(claims.hosted), lent: claims.lent },
        'published the moved addresses this node hosts and those of its range it lends',
      );
    } catch (err) {
      this.o.log.warn({ err }, 'could not publish the moved addresses this node hosts and lends; the next repair retries');
    }
  }
}

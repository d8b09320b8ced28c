// The node's side of the pod network: a Linux bridge that owns the node's pod
// range (its first address is the VMs' gateway), DHCP for VMs that hold pod
// addresses, forwarding for the bridge, NAT for traffic leaving the cluster's
// pod ranges through the host's default route, routes to other nodes' pod
// ranges (peer-routes.ts), and the filter on the bridge's VM ports
// (port-filter.ts); the bridge takes no router advertisements. Everything is
// ensured idempotently, and only what this agent created is ever removed: a
// bridge that existed before it is used as it is and left behind.
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.js';
import { DhcpAcks, dhcpTagOf } from './dhcp-acks.js';
import { ensureDnsmasq, restartDnsmasq, renderDnsmasqConf, renderVmDhcpOptions, stopDnsmasq, type DnsmasqInstance } from './dnsmasq.js';
import type { GuestDns } from './resolver.js';
import { createHash } from 'node:crypto';
import {
  addresses,
  defaultRouteDevice,
  deleteChain,
  deleteRule,
  ensureChainRules,
  ensureRule,
  INTERFACE_NAME,
  links,
  refuseRouterAdvertisements,
  run,
  setNetSysctl,
} from './host.js';
import { gatewayOf, intToIp, parseIpv4Range, type Ipv4Range } from './ipv4.js';
import { ensurePeerRoutes, removePeerRoutes, type PeerNode, type PeerRoute } from './peer-routes.js';
import { PortFilter, portFilterTable, removePortFilter } from './port-filter.js';
import { applyMovedRoutes, removeMovedRoutes, type MovedPlan, type MovedRoute } from './moved-routes.js';
import { writeAtomic } from '../atomic-file.js';

export interface NodeNetworkOptions {
  /** Bridge name (IFNAMSIZ: at most 15 characters). */
  bridge: string;
  /** The agent's network state: what it created, DHCP config, leases. */
  dir: string;
  log: Logger;
}

/** What the agent created, so removal takes nothing else. */
interface NodeRecord {
  bridge: string;
  createdBridge: boolean;
  cidr: string;
  /** Routes to other nodes' pod ranges this agent added. */
  peerRoutes?: PeerRoute[];
  /** /32 routes of migrated VMs' addresses this agent added (moved-routes.ts). */
  movedRoutes?: MovedRoute[];
}

/** The node's part in keeping migrated VMs' addresses (moved-address.ts). */
export interface MovedNetwork {
  plan: Pick<MovedPlan, 'routes' | 'forwarded' | 'natted'>;
  /** Other nodes' ranges of VMs that migrated here with their addresses: DHCP serves them too. */
  homeRanges: Ipv4Range[];
}

const NO_MOVES: MovedNetwork = { plan: { routes: [], forwarded: [], natted: [] }, homeRanges: [] };

export function netmaskOf(range: Ipv4Range): string {
  return intToIp(range.prefixLength === 0 ? 0 : (0xffffffff << (32 - range.prefixLength)) >>> 0);
}

/** A locally administered MAC derived from the bridge name. */
export function bridgeMac(name: string): string {
  const hash = createHash('sha256').update(`vkvm-bridge/${name}`).digest();
  return ['02', ...[...hash.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

const forwardChainOf = (bridge: string): string => `VKVM-FWD-${bridge}`;
const natChainOf = (bridge: string): string => `VKVM-NAT-${bridge}`;
const hostedNatChainOf = (bridge: string): string => `VKVM-HOSTED-${bridge}`;

/** What ensure() added for a range the node no longer has (no VM holds an address in it). */
async function removeRangeRules(bridge: string, cidr: string): Promise<void> {
  await deleteRule('nat', 'POSTROUTING', ['-s', cidr, '-j', natChainOf(bridge)]);
  const range = parseIpv4Range(cidr, 'node.json cidr');
  await run(['ip', 'addr', 'del', `${gatewayOf(range)}/${range.prefixLength}`, 'dev', bridge]).catch(() => undefined);
}

async function isBridge(dev: string): Promise<boolean> {
  const [link] = JSON.parse(await run(['ip', '-d', '-j', 'link', 'show', dev])) as Array<{ linkinfo?: { info_kind?: string } }>;
  return link?.linkinfo?.info_kind === 'bridge';
}

export class NodeNetwork {
  readonly forwardChain: string;
  readonly natChain: string;
  private readonly recordFile: string;
  readonly dhcpHostsDir: string;
  /** Each VM's resolver options, beside its host entry (same file name). */
  readonly dhcpOptsDir: string;
  /** What each VM's port on the bridge lets out; kept by the pod network, which knows the VMs. */
  readonly ports: PortFilter;
  /** When each VM's guest took its address by DHCP, from this node's dnsmasq instances. */
  readonly dhcpAcks: DhcpAcks;
  private readonly dnsmasq: DnsmasqInstance;
  /** dnsmasq's starts, restarts and stop, one at a time: a start between a restart's stop and its own start would leave two. */
  private dnsmasqOps: Promise<unknown> = Promise.resolve();
  /** Peers already warned about (a skipped route is logged once, not every repair). */
  private readonly peerWarnings = new Set<string>();

  constructor(private readonly o: NodeNetworkOptions) {
    if (!INTERFACE_NAME.test(o.bridge))
      throw new Error(`--bridge: ${JSON.stringify(o.bridge)} is not an interface name (1-15 of A-Z a-z 0-9 _ . -)`);
    this.forwardChain = forwardChainOf(o.bridge);
    this.natChain = natChainOf(o.bridge);
    this.recordFile = path.join(o.dir, 'node.json');
    this.dhcpHostsDir = path.join(o.dir, 'dhcp-hosts');
    this.dhcpOptsDir = path.join(o.dir, 'dhcp-opts');
    this.dnsmasq = { confFile: path.join(o.dir, 'dnsmasq.conf'), pidFile: path.join(o.dir, 'dnsmasq.pid') };
    this.ports = new PortFilter(o.bridge, bridgeMac(o.bridge), o.log);
    this.dhcpAcks = new DhcpAcks(path.join(o.dir, 'dhcp-acks'), o.dir, o.log);
  }

  /**
   * Makes the node's side of the network match `range`. Idempotent; repairs
   * what was removed behind its back. `dnsServers`: what guests are told.
   */
  async ensure(range: Ipv4Range, dnsServers: string[], peers: readonly PeerNode[] = [], moved: MovedNetwork = NO_MOVES): Promise<void> {
    // dnsmasq reads the hosts directory after dropping to nobody: it must be reachable and readable.
    await mkdir(this.o.dir, { recursive: true, mode: 0o711 });
    await chmod(this.o.dir, 0o711);
    await mkdir(this.dhcpHostsDir, { recursive: true, mode: 0o755 });
    await mkdir(this.dhcpOptsDir, { recursive: true, mode: 0o755 });
    const record = await this.readRecord();
    const br = this.o.bridge;
    if (record && record.bridge !== br) {
      // The record is what removal goes by: switching would leave the old bridge's rules, and its VMs, behind.
      throw new Error(
        `--bridge: this node's pod network is on ${record.bridge}; restart with --bridge=${record.bridge}, or run vkvm reset first to move it to ${br}`,
      );
    }
    const existing = (await links()).get(br);
    let createdBridge = record?.bridge === br && record.createdBridge;
    if (!existing) {
      // Recorded before it exists: a crash right after leaves a record of something absent, which is harmless.
      await this.writeRecord({ bridge: br, createdBridge: true, cidr: range.cidr });
      // A fixed MAC: a bridge otherwise takes its lowest port's, and the gateway's MAC would change under the guests.
      await run(['ip', 'link', 'add', br, 'address', bridgeMac(br), 'type', 'bridge']);
      createdBridge = true;
      this.o.log.info({ bridge: br }, 'created the pod network bridge');
    } else if (!(await isBridge(br))) {
      throw new Error(`--bridge: ${br} exists and is not a bridge`);
    }
    if (record && record.cidr !== range.cidr) await removeRangeRules(br, record.cidr);
    const peerRoutes = record?.peerRoutes ?? [];
    const movedRoutes = record?.movedRoutes ?? [];
    await this.writeRecord({ bridge: br, createdBridge, cidr: range.cidr, peerRoutes, movedRoutes });
    const gateway = `${gatewayOf(range)}/${range.prefixLength}`;
    if (!(await addresses(br)).includes(gateway)) await run(['ip', 'addr', 'add', gateway, 'dev', br]);
    // Before it is up: a guest's router advertisement must never give the host routes or addresses.
    await refuseRouterAdvertisements(br);
    await run(['ip', 'link', 'set', br, 'up']);

    // Forwarding is decided by the interface a packet enters: the bridge (guests' traffic) and the
    // uplink (replies to it, after NAT). Host-wide ip_forward stays as it was.
    const uplink = await defaultRouteDevice();
    await setNetSysctl(`net.ipv4.conf.${br}.forwarding`, '1');
    if (uplink) await setNetSysctl(`net.ipv4.conf.${uplink}.forwarding`, '1');
    // A VM that migrated here ARPs for its home gateway and neighbours, and this node's VMs for one that
    // migrated away: the node answers for addresses it routes elsewhere, at once (not after up to 0.8 s).
    await setNetSysctl(`net.ipv4.conf.${br}.proxy_arp`, '1');
    await setNetSysctl(`net.ipv4.neigh.${br}.proxy_delay`, '0');

    // Guests may open connections out, and other nodes' pods in (pod to pod, no NAT either way);
    // from anywhere else only replies come in.
    const peerCidrs = [...new Set(peers.map((p) => p.podCidr))].filter((c) => c !== range.cidr).sort();
    await ensureChainRules('filter', this.forwardChain, [
      ['-i', br, '-j', 'ACCEPT'],
      ...peerCidrs.map((cidr) => ['-s', cidr, '-o', br, '-j', 'ACCEPT']),
      ['-o', br, '-m', 'conntrack', '--ctstate', 'RELATED,ESTABLISHED', '-j', 'ACCEPT'],
      // Passed on to the node now hosting a migrated VM, whose own rules decide what reaches it.
      ...moved.plan.forwarded.map((ip) => ['-d', `${ip}/32`, '!', '-o', br, '-j', 'ACCEPT']),
    ]);
    await ensureRule('filter', 'FORWARD', ['-j', this.forwardChain], { insert: true });
    await ensureChainRules('nat', this.natChain, [
      ['-d', range.cidr, '-j', 'RETURN'],
      ...peerCidrs.map((cidr) => ['-d', cidr, '-j', 'RETURN']),
      ['!', '-o', br, '-j', 'MASQUERADE'],
    ]);
    const routed = await ensurePeerRoutes(peers, peerRoutes, range.cidr, this.o.log, this.peerWarnings);
    // After the ranges: a /32 beats its range whatever the order, but a VM moved away must not be routed home meanwhile.
    const moves = await applyMovedRoutes(moved.plan.routes, movedRoutes, this.o.log);
    if (JSON.stringify(routed) !== JSON.stringify(peerRoutes) || JSON.stringify(moves) !== JSON.stringify(movedRoutes))
      await this.writeRecord({ bridge: br, createdBridge, cidr: range.cidr, peerRoutes: routed, movedRoutes: moves });
    await ensureRule('nat', 'POSTROUTING', ['-s', range.cidr, '-j', this.natChain]);
    // Migrated VMs' traffic leaving the cluster is NATed as this node's own pods' is.
    await ensureChainRules(
      'nat',
      hostedNatChainOf(br),
      moved.plan.natted.map((ip) => ['-s', `${ip}/32`, '-j', this.natChain]),
    );
    await ensureRule('nat', 'POSTROUTING', ['-j', hostedNatChainOf(br)]);

    const conf = renderDnsmasqConf(
      {
        interface: br,
        network: intToIp(range.network),
        netmask: netmaskOf(range),
        router: gatewayOf(range),
        dnsServers,
        hostsDir: this.dhcpHostsDir,
        optsDir: this.dhcpOptsDir,
        leaseTime: '1h',
        leaseScript: this.dhcpAcks.script,
        sharedNetworks: moved.homeRanges.map((r) => ({ network: intToIp(r.network), netmask: netmaskOf(r), router: gatewayOf(r) })),
      },
      this.dnsmasq.pidFile,
    );
    await this.dhcpAcks.ensure();
    await this.onDnsmasq(() => ensureDnsmasq(this.dnsmasq, conf));
  }

  private onDnsmasq<T>(op: () => Promise<T>): Promise<T> {
    const done = this.dnsmasqOps.then(op);
    this.dnsmasqOps = done.catch(() => undefined);
    return done;
  }

  /**
   * Serves `ip` to `mac` by DHCP on the bridge, with the VM's own resolver
   * (dnsmasq re-reads both directories), tagged as the VM's. The options go first: the host
   * entry's tag names them, and a guest asking in between gets the defaults.
   */
  async addDhcpHost(owner: string, mac: string, ip: string, dns?: GuestDns): Promise<void> {
    // The tag also tells the lease script whose guest was served (dhcp-acks.ts).
    const tag = dhcpTagOf(owner);
    if (dns) await writeIfChanged(path.join(this.dhcpOptsDir, owner), renderVmDhcpOptions(tag, dns));
    await writeIfChanged(path.join(this.dhcpHostsDir, owner), `${mac},set:${tag},${ip}\n`);
  }

  /**
   * Stops serving `owner`'s address so the next VM given it is served:
   * dnsmasq forgets a deleted hosts file, and the lease it keeps in memory,
   * which would refuse the address to another MAC while it lasts, only when
   * restarted (restartDnsmasq).
   */
  async removeDhcpHost(owner: string): Promise<void> {
    await rm(path.join(this.dhcpHostsDir, owner), { force: true });
    await rm(path.join(this.dhcpOptsDir, owner), { force: true });
    // One at a time, each after its own removal: two at once could leave the later start reading a file since removed.
    await this.onDnsmasq(() => restartDnsmasq(this.dnsmasq));
  }

  /**
   * Removes what `ensure` made: DHCP, rules, the port filter, and the bridge if this agent
   * created it (vkvm reset, tests). VMs must be gone first.
   */
  async remove(): Promise<void> {
    const record = await this.readRecord();
    this.dhcpAcks.close();
    await this.onDnsmasq(() => stopDnsmasq(this.dnsmasq));
    // By the record: what was built may be on another bridge than this agent's flag names.
    const bridge = record?.bridge ?? this.o.bridge;
    await deleteRule('filter', 'FORWARD', ['-j', forwardChainOf(bridge)]);
    await deleteChain('filter', forwardChainOf(bridge));
    if (record) await removeRangeRules(bridge, record.cidr);
    await removePeerRoutes(record?.peerRoutes ?? []);
    await removeMovedRoutes(record?.movedRoutes ?? []);
    await deleteRule('nat', 'POSTROUTING', ['-j', hostedNatChainOf(bridge)]);
    await deleteChain('nat', hostedNatChainOf(bridge));
    await deleteChain('nat', natChainOf(bridge));
    await removePortFilter(portFilterTable(bridge));
    if (record?.createdBridge && (await links()).has(record.bridge)) await run(['ip', 'link', 'del', record.bridge]);
    await rm(this.o.dir, { recursive: true, force: true });
  }

  private async readRecord(): Promise<NodeRecord | undefined> {
    const text = await readFile(this.recordFile, 'utf8').catch(() => undefined);
    return text ? (JSON.parse(text) as NodeRecord) : undefined;
  }

  private async writeRecord(r: NodeRecord): Promise<void> {
    // Whole or not at all: a torn record would make every later ensure() fail to parse it.
    await writeAtomic(this.recordFile, JSON.stringify(r), 0o600);
  }
}

/** Writes only a change: dnsmasq re-reads a file on every write. */
async function writeIfChanged(file: string, content: string): Promise<void> {
  if ((await readFile(file, 'utf8').catch(() => '')) !== content) await writeFile(file, content, { mode: 0o644 });
}

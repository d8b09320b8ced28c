// Anti-spoofing on the node bridge. A guest always has raw sockets, and on a
// shared layer 2 it could claim the gateway's or another VM's address by ARP,
// teach the bridge another VM's MAC, answer DHCP for VMs that are starting,
// decline another VM's address to dnsmasq, advertise itself as an IPv6
// router, or send as another VM. So each VM's port (its host veth) lets out
// only frames from its MAC carrying IPv4 from its address (and DHCP requests
// from 0.0.0.0 for its own MAC), ARP about its own address, or RARP (a
// migrated guest's self-announce, from its MAC); the pod network
// is IPv4, so nothing else. One nftables `bridge` table per node bridge holds
// a chain per port; it is rebuilt whole, in one atomic `nft -f` batch, from
// the VMs' port records, so what it holds is always exactly those.
//
// The same table hands the node's routing every unicast frame from a port to
// a MAC that no port here holds. Guests on a node's range talk to each other
// at layer 2, so after a live migration a guest's neighbour entry still names
// a VM's MAC that has left this bridge (and the moved guest's entries name
// MACs of the bridge it left). Flooded, such frames reach nobody until the
// entry ages out and is resolved again, up to a minute for a held connection.
// Rewritten to the bridge's MAC, they are routed at once, as the /32 routes of
// moved addresses say.
import type { Logger } from '../log.js';
import { INTERFACE_NAME, run } from './host.js';

/** A VM's port on the node bridge and what may leave it (the VM's lease). */
export interface VmPort {
  /** The host end of the VM's veth pair. */
  veth: string;
  /** The MAC its frames come from: the guest's (bridge) or its namespace's eth0 (masquerade). */
  mac: string;
  /** The pod address. */
  ip: string;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** Throws unless `p` can be written into the script safely; a VM's record is checked before it is written, so one bad port fails only its VM. */
export function assertFilterable(p: VmPort): void {
  if (!INTERFACE_NAME.test(p.veth) || !MAC.test(p.mac) || !IPV4.test(p.ip))
    throw new Error(`cannot filter port ${JSON.stringify(p)}: not an interface name, lower-case MAC and IPv4 address`);
}

export const portFilterTable = (bridge: string): string => `vkvm-${bridge}`;
const chainOf = (veth: string): string => `port-${veth}`;

/** Drop rules are counted and named, so `nft list table bridge vkvm-<bridge>` shows what each port tried. */
function portRules({ mac, ip }: VmPort): string[] {
  const drop = (match: string, why: string) => `${match} counter drop comment "${why}"`;
  return [
    drop(`ether saddr != ${mac}`, 'another MAC'),
    // QEMU's self-announce after a migration: RARP from the guest's MAC teaches the bridge its new port.
    'ether type 0x8035 accept',
    // ARP probes (RFC 5227) come from 0.0.0.0; nobody learns an address from them.
    `arp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp saddr ether ${mac} arp saddr ip { ${ip}, 0.0.0.0 } accept`,
    drop('ether type arp', 'ARP for another address'),
    drop('udp sport 67', 'DHCP server message'),
    // dnsmasq goes by chaddr: a DECLINE for another VM's MAC would take that VM's address away for minutes.
    drop(`udp dport 67 @th,288,48 != 0x${mac.replace(/:/g, '')}`, 'DHCP for another MAC'),
    // A first fragment too short to hold chaddr passes the rule above; its datagram must not.
    drop('udp dport 67 ip frag-off & 0x3fff != 0', 'fragmented DHCP'),
    'ip saddr 0.0.0.0 ip daddr 255.255.255.255 udp sport 68 udp dport 67 accept',
    `ip saddr ${ip} accept`,
    drop('ether type ip', 'IPv4 from another address'),
    drop('icmpv6 type nd-router-advert', 'IPv6 router advertisement'),
    'counter drop comment "neither IPv4 nor ARP"',
  ];
}

/**
 * The `nft -f` script that replaces the table with one filtering `ports` on
 * the bridge whose MAC is `bridgeMac`. Pure; throws on a port it could not
 * render safely (its fields are written into the script).
 */
export function renderPortFilter(table: string, bridgeMac: string, ports: readonly VmPort[]): string {
  if (!MAC.test(bridgeMac)) throw new Error(`cannot filter the bridge of MAC ${JSON.stringify(bridgeMac)}: not a lower-case MAC`);
  ports.forEach(assertFilterable);
  const sorted = [...ports].sort((a, b) => (a.veth < b.veth ? -1 : a.veth > b.veth ? 1 : 0));
  const dispatch = sorted.map((p) => `"${p.veth}" : jump ${chainOf(p.veth)}`).join(', ');
  return [
    // Declared first so the delete finds a table: create, delete and fill commit as one transaction.
    `table bridge ${table}`,
    `delete table bridge ${table}`,
    `table bridge ${table} {`,
    '\tchain ports {',
    // Priority filter on prerouting: before the bridge learns the source MAC or delivers to the host.
    '\t\ttype filter hook prerouting priority filter; policy accept;',
    ...(sorted.length ? [`\t\tiifname vmap { ${dispatch} }`] : []),
    '\t}',
    ...sorted.flatMap((p) => ['', `\tchain ${chainOf(p.veth)} {`, ...portRules(p).map((r) => `\t\t${r}`), '\t}']),
    ...(sorted.length ? ['', ...toAbsentMacs(bridgeMac, sorted)] : []),
    '}',
    '',
  ].join('\n');
}

/**
 * After the port chains (a spoofed frame is dropped first): a unicast frame
 * from a port to a MAC no port holds goes to the node (before the bridge
 * looks its destination up), which routes it by its IPv4 destination.
 */
function toAbsentMacs(bridgeMac: string, ports: readonly VmPort[]): string[] {
  const veths = ports.map((p) => `"${p.veth}"`).join(', ');
  const here = [...new Set([bridgeMac, ...ports.map((p) => p.mac)])].sort().join(', ');
  return [
    '\tchain to-absent-macs {',
    '\t\ttype filter hook prerouting priority filter + 10; policy accept;',
    `\t\tiifname { ${veths} } meta pkttype != { broadcast, multicast } ether daddr != { ${here} } ether daddr set ${bridgeMac} meta pkttype set host counter comment "to a MAC no port holds: routed"`,
    '\t}',
  ];
}

/** Removes the table; nothing when it is absent. */
export async function removePortFilter(table: string): Promise<void> {
  await run(['nft', '-f', '-'], { input: `table bridge ${table}\ndelete table bridge ${table}\n` });
}

/** The node bridge's port filter, kept equal to the VMs' port records. */
export class PortFilter {
  readonly table: string;
  /** The last script applied and nft's listing of it right after (without counters). */
  private applied: { script: string; listing: string } | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  /** The run that waits for the one under way, with the load it will call; callers arriving meanwhile share it. */
  private next: { run: Promise<void>; load: () => Promise<VmPort[]> } | undefined;

  constructor(
    bridge: string,
    private readonly bridgeMac: string,
    private readonly log: Logger,
  ) {
    this.table = portFilterTable(bridge);
  }

  /**
   * Makes the table filter exactly the ports `load` returns, loaded in turn
   * so concurrent callers never apply a stale list. Callers that arrive while
   * a run waits to start share that run, which calls the last one's `load`
   * when it starts: a burst of VM starts rebuilds the table a few times, not
   * once per VM. Unchanged and intact, it is left alone (its counters with
   * it); removed or edited behind the agent's back, it is rebuilt.
   */
  ensure(load: () => Promise<VmPort[]>): Promise<void> {
    if (this.next) {
      this.next.load = load;
      return this.next.run;
    }
    const next: { run: Promise<void>; load: () => Promise<VmPort[]> } = {
      load,
      run: this.queue.then(() => {
        this.next = undefined;
        return this.ensureNow(next.load);
      }),
    };
    this.next = next;
    this.queue = next.run.catch(() => undefined);
    return next.run;
  }

  private async ensureNow(load: () => Promise<VmPort[]>): Promise<void> {
    const ports = await load();
    const script = renderPortFilter(this.table, this.bridgeMac, ports);
    const same = this.applied?.script === script;
    if (same && (await this.listing().catch(() => undefined)) === this.applied!.listing) return;
    await run(['nft', '-f', '-'], { input: script });
    this.applied = { script, listing: await this.listing() };
    if (same)
      this.log.warn({ table: this.table, ports: ports.length }, 'the port filter was changed or removed behind the agent’s back; rebuilt');
    else this.log.info({ table: this.table, ports: ports.map((p) => p.veth) }, 'port filter applied');
  }

  private listing(): Promise<string> {
    return run(['nft', '--stateless', 'list', 'table', 'bridge', this.table]);
  }
}

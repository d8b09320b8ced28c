// One VM's side of the pod network, in a network namespace of its own (as a
// pod's): a veth pair joins it to the node bridge, and the guest's tap lives
// inside, where the VM's libvirtd and QEMU run.
//   bridge      tap0 and eth0 share an in-namespace bridge: the guest is on
//               the node's L2 and holds the pod address, which the node's
//               DHCP hands to its MAC.
//   masquerade  eth0 holds the pod address; the guest gets 10.0.2.2 behind
//               10.0.2.1 from a DHCP server inside the namespace, the listed
//               ports of the pod address are forwarded to it (all when none
//               are listed, as KubeVirt does) and its traffic leaves as the
//               pod address.
// Names follow from the VM uid, so everything can be found again after a crash.
// What may leave the VM's port is recorded beside its state (port-filter.ts).
import { createHash } from 'node:crypto';
import { access, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { InterfaceSpec } from '../../vmm/spec.js';
import { writeAtomic } from '../atomic-file.js';
import { dhcpTagOf } from './dhcp-acks.js';
import { ensureDnsmasq, renderDnsmasqConf, stopDnsmasq, type DnsmasqInstance } from './dnsmasq.js';
import type { GuestDns } from './resolver.js';
import { hostLink, ipBatch, ipBatchRemoval, links, run, type IpLink } from './host.js';
import { assertFilterable, type VmPort } from './port-filter.js';

export const NETNS_DIR = '/run/netns';
export const GUEST_TAP = 'tap0';
const POD_IFACE = 'eth0';
const INNER_BRIDGE = 'k6t-eth0';
/** KubeVirt's masquerade addresses (pkg/network/link). */
export const MASQUERADE_GATEWAY = '10.0.2.1';
export const MASQUERADE_GUEST = '10.0.2.2';

export interface VmNetworkNames {
  netns: string;
  netnsPath: string;
  /** Host end of the veth pair, on the node bridge. */
  hostVeth: string;
}

export function vmNetworkNames(uid: string): VmNetworkNames {
  const netns = `vkvm-${uid}`;
  return { netns, netnsPath: path.join(NETNS_DIR, netns), hostVeth: `vh${createHash('sha256').update(uid).digest('hex').slice(0, 12)}` };
}

/**
 * Puts a VM's host veth back on the node bridge and up: a bridge re-created
 * by the node's repair has no ports. True when it had to be re-enslaved.
 */
export async function rejoinNodeBridge(hostVeth: IpLink, bridge: string): Promise<boolean> {
  const moved = hostVeth.master !== bridge;
  if (moved) await run(['ip', 'link', 'set', hostVeth.ifname, 'master', bridge]);
  if (hostVeth.operstate === 'DOWN') await run(['ip', 'link', 'set', hostVeth.ifname, 'up']);
  return moved;
}

export interface VmNetworkPlan {
  uid: string;
  iface: InterfaceSpec;
  /** The pod address and the node range's prefix length and gateway. */
  podIP: string;
  prefixLength: number;
  gateway: string;
  /** The resolver the masquerade guest's DHCP hands out. */
  dns: GuestDns;
  nodeBridge: string;
  /** The VM's directory of network state (its ready marker, DHCP config). */
  dir: string;
  /** The lease script a masquerade guest's DHCP server runs (dhcp-acks.ts). */
  dhcpScript?: string;
}

function dnsmasqOf(dir: string, netnsPath: string): DnsmasqInstance {
  return { confFile: path.join(dir, 'dnsmasq.conf'), pidFile: path.join(dir, 'dnsmasq.pid'), netns: netnsPath };
}

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

const PORT_FILE = 'port.json';

/** The VM's port record, if written: what its filter on the node bridge lets out. */
export async function readVmPort(dir: string): Promise<VmPort | undefined> {
  const text = await readFile(path.join(dir, PORT_FILE), 'utf8').catch(() => undefined);
  return text ? (JSON.parse(text) as VmPort) : undefined;
}

/**
 * The MAC of the namespace's end of the veth pair, fixed from the VM uid (a
 * locally administered unicast address), so the port record needs no lookup.
 */
export function podIfaceMac(uid: string): string {
  const hash = createHash('sha256').update(`vkvm-eth0/${uid}`).digest();
  return ['02', ...[...hash.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

/**
 * The MAC of a masquerade guest's gateway (the tap, 10.0.2.1), fixed from the
 * guest's own MAC: the guest keeps its ARP entry for the gateway when it
 * migrates, so the tap on the new node must answer to the same MAC.
 */
export function masqueradeGatewayMac(guestMac: string): string {
  const hash = createHash('sha256').update(`vkvm-tap0/${guestMac.toLowerCase()}`).digest();
  return ['02', ...[...hash.subarray(0, 5)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

/**
 * Records the VM's port unless it is recorded (a namespace built afresh has
 * no record; one an older agent built gets it now). A bridge guest sends as
 * its own MAC; a masquerade guest only through the namespace's routing, as
 * eth0 (`eth0Mac` when known, else read from the namespace).
 */
async function recordPort(p: VmNetworkPlan, names: VmNetworkNames, eth0Mac?: string): Promise<boolean> {
  const file = path.join(p.dir, PORT_FILE);
  if (await exists(file)) return false;
  const mac = p.iface.binding === 'bridge' ? p.iface.mac : (eth0Mac ?? (await links(names.netnsPath)).get(POD_IFACE)?.address);
  if (!mac) throw new Error(`${POD_IFACE} of ${names.netns} has no MAC address`);
  const port: VmPort = { veth: names.hostVeth, mac: mac.toLowerCase(), ip: p.podIP };
  assertFilterable(port);
  await writeAtomic(file, JSON.stringify(port), 0o600);
  return true;
}

/** A removal's failures that only say the thing was gone already. */
const GONE = /Cannot find device|No such file or directory/;

/**
 * The iproute2 commands that build the inside of a VM's namespace (pure):
 * a bridge joining eth0 and the tap, or eth0 holding the pod address and
 * the tap the masquerade gateway.
 */
export function namespaceCommands(p: Pick<VmNetworkPlan, 'iface' | 'podIP' | 'prefixLength' | 'gateway'>): string[][] {
  const common = [
    ['link', 'set', 'lo', 'up'],
    ['tuntap', 'add', 'dev', GUEST_TAP, 'mode', 'tap'],
  ];
  if (p.iface.binding === 'bridge') {
    return [
      ...common,
      ['link', 'add', INNER_BRIDGE, 'type', 'bridge'],
      ['link', 'set', POD_IFACE, 'master', INNER_BRIDGE],
      ['link', 'set', GUEST_TAP, 'master', INNER_BRIDGE],
      ...[INNER_BRIDGE, POD_IFACE, GUEST_TAP].map((dev) => ['link', 'set', dev, 'up']),
    ];
  }
  return [
    ...common,
    ['addr', 'add', `${p.podIP}/${p.prefixLength}`, 'dev', POD_IFACE],
    ['link', 'set', POD_IFACE, 'up'],
    ['route', 'add', 'default', 'via', p.gateway],
    ['link', 'set', GUEST_TAP, 'address', masqueradeGatewayMac(p.iface.mac)],
    ['addr', 'add', `${MASQUERADE_GATEWAY}/24`, 'dev', GUEST_TAP],
    ['link', 'set', GUEST_TAP, 'up'],
  ];
}

/** Table of the masquerade NAT inside a VM's namespace. */
export const MASQUERADE_TABLE = 'vkvm-masquerade';

/**
 * The `nft -f` script of a masquerade VM's NAT (pure): the listed ports of
 * the pod address (all when none are listed, as KubeVirt does) go to the
 * guest, and the whole guest subnet leaves as the pod address, so a guest
 * that picks another 10.0.2.x does not leave un-NATed.
 */
export function renderMasqueradeNat(forwardPorts: InterfaceSpec['forwardPorts']): string {
  const dnat = `dnat to ${MASQUERADE_GUEST}`;
  const forwards = forwardPorts?.length
    ? forwardPorts.map((fp) => {
        if (!Number.isInteger(fp.port) || fp.port < 1 || fp.port > 65535) throw new Error(`cannot forward port ${JSON.stringify(fp)}`);
        return `iifname "${POD_IFACE}" ${fp.protocol === 'UDP' ? 'udp' : 'tcp'} dport ${fp.port} ${dnat}`;
      })
    : [`iifname "${POD_IFACE}" ${dnat}`];
  return [
    `table ip ${MASQUERADE_TABLE} {`,
    '\tchain prerouting {',
    '\t\ttype nat hook prerouting priority dstnat; policy accept;',
    ...forwards.map((r) => `\t\t${r}`),
    '\t}',
    '\tchain postrouting {',
    '\t\ttype nat hook postrouting priority srcnat; policy accept;',
    `\t\tip saddr 10.0.2.0/24 oifname "${POD_IFACE}" masquerade`,
    '\t}',
    '}',
    '',
  ].join('\n');
}

/**
 * Makes the VM's namespace match the plan. A namespace that was never
 * completed (crash half-way) is rebuilt from scratch; a complete one only gets
 * its DHCP server restarted if it died. Idempotent. A fresh build is a few
 * processes whatever the binding: one `ip -batch` on the host, one in the
 * namespace, and for masquerade one that turns forwarding on and loads the
 * NAT, then the DHCP server. `portRecorded`: the VM's port record was written
 * now, so the bridge's port filter must follow.
 */
export async function ensureVmNetwork(p: VmNetworkPlan): Promise<VmNetworkNames & { portRecorded: boolean }> {
  const names = vmNetworkNames(p.uid);
  const ready = path.join(p.dir, 'ready');
  await mkdir(p.dir, { recursive: true, mode: 0o700 });
  const hostVeth = await hostLink(names.hostVeth);
  if ((await exists(ready)) && (await exists(names.netnsPath)) && hostVeth) {
    await rejoinNodeBridge(hostVeth, p.nodeBridge);
    if (p.iface.binding === 'masquerade') await ensureDnsmasq(dnsmasqOf(p.dir, names.netnsPath), masqueradeDhcp(p));
    return { ...names, portRecorded: await recordPort(p, names) };
  }
  await removeVmNetwork(p.uid, p.dir, { keepDir: true, hostVethExists: hostVeth !== undefined });
  const ns = names.netns;
  const eth0Mac = podIfaceMac(p.uid);
  await ipBatch([
    ['netns', 'add', ns],
    ['link', 'add', names.hostVeth, 'type', 'veth', 'peer', 'name', POD_IFACE, 'address', eth0Mac, 'netns', ns],
    ['link', 'set', names.hostVeth, 'master', p.nodeBridge],
    ['link', 'set', names.hostVeth, 'up'],
  ]);
  await ipBatch(namespaceCommands(p), { netns: ns });
  if (p.iface.binding === 'masquerade') {
    // One process: nsenter and sh exec in place, so forwarding is set and the NAT loaded inside the namespace.
    await run(['nsenter', `--net=${names.netnsPath}`, '--', 'sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward && exec nft -f -'], {
      input: renderMasqueradeNat(p.iface.forwardPorts),
    });
    await ensureDnsmasq(dnsmasqOf(p.dir, names.netnsPath), masqueradeDhcp(p));
  }
  await recordPort(p, names, eth0Mac);
  await writeFile(ready, `${new Date().toISOString()}\n`);
  return { ...names, portRecorded: true };
}

function masqueradeDhcp(p: VmNetworkPlan): string {
  return renderDnsmasqConf(
    {
      interface: GUEST_TAP,
      network: '10.0.2.0',
      netmask: '255.255.255.0',
      router: MASQUERADE_GATEWAY,
      dnsServers: p.dns.nameservers,
      searches: p.dns.searches,
      // Tagged: the lease script records whose guest it served.
      hosts: [`${p.iface.mac},set:${dhcpTagOf(p.uid)},${MASQUERADE_GUEST}`],
      leaseTime: '1h',
      ...(p.dhcpScript ? { leaseScript: p.dhcpScript } : {}),
    },
    dnsmasqOf(p.dir, vmNetworkNames(p.uid).netnsPath).pidFile,
  );
}

/**
 * Removes the VM's namespace, veth pair and DHCP server. Idempotent; call
 * after its launcher is gone. The host end goes first, in the same process:
 * that destroys the pair at once, where the namespace's teardown would take
 * it down only later, in the kernel's own time.
 */
export async function removeVmNetwork(
  uid: string,
  dir: string,
  opts: { keepDir?: boolean; /** The caller just listed the host's links: skip what is not there. */ hostVethExists?: boolean } = {},
): Promise<void> {
  const names = vmNetworkNames(uid);
  await stopDnsmasq(dnsmasqOf(dir, names.netnsPath));
  const commands = [
    ...(opts.hostVethExists === false ? [] : [['link', 'del', names.hostVeth]]),
    ...((await exists(names.netnsPath)) ? [['netns', 'del', names.netns]] : []),
  ];
  await ipBatchRemoval(commands, GONE);
  if (opts.keepDir) for (const file of ['ready', PORT_FILE]) await rm(path.join(dir, file), { force: true });
  else await rm(dir, { recursive: true, force: true });
}

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
import { ensureDnsmasq, renderDnsmasqConf, stopDnsmasq, type DnsmasqInstance } from './dnsmasq.js';
import { ensureRule, HostCommandError, links, run, setNetSysctl, type IpLink } from './host.js';
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
  /** What the masquerade guest's DHCP hands out. */
  dnsServers: string[];
  nodeBridge: string;
  /** The VM's directory of network state (its ready marker, DHCP config). */
  dir: string;
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
 * Records the VM's port unless it is recorded (a namespace built afresh has
 * no record; one an older agent built gets it now). A bridge guest sends as
 * its own MAC; a masquerade guest only through the namespace's routing, as eth0.
 */
async function recordPort(p: VmNetworkPlan, names: VmNetworkNames): Promise<void> {
  const file = path.join(p.dir, PORT_FILE);
  if (await exists(file)) return;
  const mac = p.iface.binding === 'bridge' ? p.iface.mac : (await links(names.netnsPath)).get(POD_IFACE)?.address;
  if (!mac) throw new Error(`${POD_IFACE} of ${names.netns} has no MAC address`);
  const port: VmPort = { veth: names.hostVeth, mac: mac.toLowerCase(), ip: p.podIP };
  assertFilterable(port);
  await writeAtomic(file, JSON.stringify(port), 0o600);
}

/** Rethrows unless the error says the thing to delete is already gone. */
function unlessGone(err: unknown): void {
  if (err instanceof HostCommandError && /Cannot find device|No such file or directory/.test(err.stderr)) return;
  throw err;
}

/**
 * Makes the VM's namespace match the plan. A namespace that was never
 * completed (crash half-way) is rebuilt from scratch; a complete one only gets
 * its DHCP server restarted if it died. Idempotent.
 */
export async function ensureVmNetwork(p: VmNetworkPlan): Promise<VmNetworkNames> {
  const names = vmNetworkNames(p.uid);
  const ready = path.join(p.dir, 'ready');
  await mkdir(p.dir, { recursive: true, mode: 0o700 });
  const hostVeth = (await links()).get(names.hostVeth);
  if ((await exists(ready)) && (await exists(names.netnsPath)) && hostVeth) {
    await rejoinNodeBridge(hostVeth, p.nodeBridge);
    if (p.iface.binding === 'masquerade') await ensureDnsmasq(dnsmasqOf(p.dir, names.netnsPath), masqueradeDhcp(p));
    await recordPort(p, names);
    return names;
  }
  await removeVmNetwork(p.uid, p.dir, { keepDir: true });
  const ns = names.netns;
  await run(['ip', 'netns', 'add', ns]);
  await run(['ip', 'link', 'add', names.hostVeth, 'type', 'veth', 'peer', 'name', POD_IFACE, 'netns', ns]);
  await run(['ip', 'link', 'set', names.hostVeth, 'master', p.nodeBridge]);
  await run(['ip', 'link', 'set', names.hostVeth, 'up']);
  const inNs = (...args: string[]) => run(['ip', '-n', ns, ...args]);
  await inNs('link', 'set', 'lo', 'up');
  await inNs('tuntap', 'add', 'dev', GUEST_TAP, 'mode', 'tap');
  if (p.iface.binding === 'bridge') {
    await inNs('link', 'add', INNER_BRIDGE, 'type', 'bridge');
    await inNs('link', 'set', POD_IFACE, 'master', INNER_BRIDGE);
    await inNs('link', 'set', GUEST_TAP, 'master', INNER_BRIDGE);
    for (const dev of [INNER_BRIDGE, POD_IFACE, GUEST_TAP]) await inNs('link', 'set', dev, 'up');
  } else {
    await inNs('addr', 'add', `${p.podIP}/${p.prefixLength}`, 'dev', POD_IFACE);
    await inNs('link', 'set', POD_IFACE, 'up');
    await inNs('route', 'add', 'default', 'via', p.gateway);
    await inNs('addr', 'add', `${MASQUERADE_GATEWAY}/24`, 'dev', GUEST_TAP);
    await inNs('link', 'set', GUEST_TAP, 'up');
    await setNetSysctl('net.ipv4.ip_forward', '1', names.netnsPath);
    const nat = (chain: string, rule: string[]) => ensureRule('nat', chain, rule, { netns: names.netnsPath });
    const ports = p.iface.forwardPorts;
    if (!ports?.length) await nat('PREROUTING', ['-i', POD_IFACE, '-j', 'DNAT', '--to-destination', MASQUERADE_GUEST]);
    for (const port of ports ?? []) {
      const proto = port.protocol.toLowerCase();
      await nat('PREROUTING', [
        '-i',
        POD_IFACE,
        '-p',
        proto,
        '--dport',
        String(port.port),
        '-j',
        'DNAT',
        '--to-destination',
        MASQUERADE_GUEST,
      ]);
    }
    // The whole guest subnet: a guest that picks another 10.0.2.x must not leave un-NATed.
    await nat('POSTROUTING', ['-s', '10.0.2.0/24', '-o', POD_IFACE, '-j', 'MASQUERADE']);
    await ensureDnsmasq(dnsmasqOf(p.dir, names.netnsPath), masqueradeDhcp(p));
  }
  await recordPort(p, names);
  await writeFile(ready, `${new Date().toISOString()}\n`);
  return names;
}

function masqueradeDhcp(p: VmNetworkPlan): string {
  return renderDnsmasqConf(
    {
      interface: GUEST_TAP,
      network: '10.0.2.0',
      netmask: '255.255.255.0',
      router: MASQUERADE_GATEWAY,
      dnsServers: p.dnsServers,
      hosts: [`${p.iface.mac},${MASQUERADE_GUEST}`],
      leaseTime: '1h',
    },
    dnsmasqOf(p.dir, vmNetworkNames(p.uid).netnsPath).pidFile,
  );
}

/** Removes the VM's namespace, veth pair and DHCP server. Idempotent; call after its launcher is gone. */
export async function removeVmNetwork(uid: string, dir: string, opts: { keepDir?: boolean } = {}): Promise<void> {
  const names = vmNetworkNames(uid);
  await stopDnsmasq(dnsmasqOf(dir, names.netnsPath));
  if (await exists(names.netnsPath)) await run(['ip', 'netns', 'del', names.netns]).catch(unlessGone);
  // The kernel tears a namespace down asynchronously: its half of the pair may still be listed for a moment.
  if ((await links()).has(names.hostVeth)) await run(['ip', 'link', 'del', names.hostVeth]).catch(unlessGone);
  if (opts.keepDir) for (const file of ['ready', PORT_FILE]) await rm(path.join(dir, file), { force: true });
  else await rm(dir, { recursive: true, force: true });
}

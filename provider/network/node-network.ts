// The node's side of the pod network: a Linux bridge that owns the node's pod
// range (its first address is the VMs' gateway), DHCP for VMs that hold pod
// addresses, forwarding for the bridge, and NAT for traffic leaving the range
// through the host's default route. Everything is ensured idempotently, and
// only what this agent created is ever removed: a bridge that existed before
// it is used as it is and left behind.
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.js';
import { ensureDnsmasq, renderDnsmasqConf, stopDnsmasq, type DnsmasqInstance } from './dnsmasq.js';
import { addresses, defaultRouteDevice, deleteChain, deleteRule, ensureChain, ensureRule, hostNameservers, links, run, setNetSysctl } from './host.js';
import { gatewayOf, intToIp, type Ipv4Range } from './ipv4.js';

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
}

export function netmaskOf(range: Ipv4Range): string {
  return intToIp(range.prefixLength === 0 ? 0 : (0xffffffff << (32 - range.prefixLength)) >>> 0);
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
  private readonly dnsmasq: DnsmasqInstance;

  constructor(private readonly o: NodeNetworkOptions) {
    if (!/^[A-Za-z0-9_.-]{1,15}$/.test(o.bridge)) throw new Error(`--bridge: ${JSON.stringify(o.bridge)} is not an interface name (1-15 of A-Z a-z 0-9 _ . -)`);
    this.forwardChain = `VKVM-FWD-${o.bridge}`;
    this.natChain = `VKVM-NAT-${o.bridge}`;
    this.recordFile = path.join(o.dir, 'node.json');
    this.dhcpHostsDir = path.join(o.dir, 'dhcp-hosts');
    this.dnsmasq = { confFile: path.join(o.dir, 'dnsmasq.conf'), pidFile: path.join(o.dir, 'dnsmasq.pid') };
  }

  get bridge(): string {
    return this.o.bridge;
  }

  /** Makes the node's side of the network match `range`. Idempotent; repairs what was removed behind its back. */
  async ensure(range: Ipv4Range): Promise<void> {
    // dnsmasq reads the hosts directory after dropping to nobody: it must be reachable and readable.
    await mkdir(this.o.dir, { recursive: true, mode: 0o711 });
    await chmod(this.o.dir, 0o711);
    await mkdir(this.dhcpHostsDir, { recursive: true, mode: 0o755 });
    const record = await this.readRecord();
    const br = this.o.bridge;
    const existing = (await links()).get(br);
    let createdBridge = record?.bridge === br && record.createdBridge;
    if (!existing) {
      // Recorded before it exists: a crash right after leaves a record of something absent, which is harmless.
      await this.writeRecord({ bridge: br, createdBridge: true, cidr: range.cidr });
      await run(['ip', 'link', 'add', br, 'type', 'bridge']);
      createdBridge = true;
      this.o.log.info({ bridge: br }, 'created the pod network bridge');
    } else if (!(await isBridge(br))) {
      throw new Error(`--bridge: ${br} exists and is not a bridge`);
    }
    await this.writeRecord({ bridge: br, createdBridge, cidr: range.cidr });
    const gateway = `${gatewayOf(range)}/${range.prefixLength}`;
    if (!(await addresses(br)).includes(gateway)) await run(['ip', 'addr', 'add', gateway, 'dev', br]);
    await run(['ip', 'link', 'set', br, 'up']);

    // Forwarding for the bridge and the uplink only; replies to NATed traffic enter on the uplink.
    const uplink = await defaultRouteDevice();
    await setNetSysctl(`net.ipv4.conf.${br}.forwarding`, '1');
    if (uplink) await setNetSysctl(`net.ipv4.conf.${uplink}.forwarding`, '1');

    await ensureChain('filter', this.forwardChain);
    await ensureRule('filter', this.forwardChain, ['-i', br, '-j', 'ACCEPT']);
    await ensureRule('filter', this.forwardChain, ['-o', br, '-j', 'ACCEPT']);
    await ensureRule('filter', 'FORWARD', ['-j', this.forwardChain], { insert: true });
    await ensureChain('nat', this.natChain);
    await ensureRule('nat', this.natChain, ['-d', range.cidr, '-j', 'RETURN']);
    await ensureRule('nat', this.natChain, ['!', '-o', br, '-j', 'MASQUERADE']);
    await ensureRule('nat', 'POSTROUTING', ['-s', range.cidr, '-j', this.natChain]);

    const conf = renderDnsmasqConf(
      {
        interface: br,
        network: intToIp(range.network),
        netmask: netmaskOf(range),
        router: gatewayOf(range),
        dnsServers: await hostNameservers(),
        hostsDir: this.dhcpHostsDir,
        leaseTime: '1h',
      },
      this.dnsmasq.pidFile,
    );
    await ensureDnsmasq(this.dnsmasq, conf);
  }

  /** Serves `ip` to `mac` by DHCP on the bridge (dnsmasq re-reads the directory). */
  async addDhcpHost(owner: string, mac: string, ip: string): Promise<void> {
    const file = path.join(this.dhcpHostsDir, owner);
    const line = `${mac},${ip}\n`;
    if ((await readFile(file, 'utf8').catch(() => '')) !== line) await writeFile(file, line, { mode: 0o644 });
  }

  async removeDhcpHost(owner: string): Promise<void> {
    await rm(path.join(this.dhcpHostsDir, owner), { force: true });
  }

  /**
   * Removes what `ensure` made: DHCP, rules, and the bridge if this agent
   * created it (vkvm reset, tests). VMs must be gone first.
   */
  async remove(): Promise<void> {
    const record = await this.readRecord();
    await stopDnsmasq(this.dnsmasq);
    await deleteRule('filter', 'FORWARD', ['-j', this.forwardChain]);
    await deleteChain('filter', this.forwardChain);
    if (record) await deleteRule('nat', 'POSTROUTING', ['-s', record.cidr, '-j', this.natChain]);
    await deleteChain('nat', this.natChain);
    if (record?.createdBridge && (await links()).has(record.bridge)) await run(['ip', 'link', 'del', record.bridge]);
    await rm(this.o.dir, { recursive: true, force: true });
  }

  private async readRecord(): Promise<NodeRecord | undefined> {
    const text = await readFile(this.recordFile, 'utf8').catch(() => undefined);
    return text ? (JSON.parse(text) as NodeRecord) : undefined;
  }

  private async writeRecord(r: NodeRecord): Promise<void> {
    await writeFile(this.recordFile, JSON.stringify(r), { mode: 0o600 });
  }
}

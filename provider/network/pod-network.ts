// The pod network of this node as the pod controller sees it: attach a VM
// (lease its address, build its namespace, serve it DHCP), detach it, and
// sweep what belongs to no VM. The node's range comes from Node.spec.podCIDR
// (kube-controller-manager allocates it) unless configured; other nodes'
// ranges are routed to them (peer-routes.ts). Each VM's port on the bridge
// lets out only its own addresses (port-filter.ts), from its port record.
import { readdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.js';
import { SpecError } from '../../vmm/errors.js';
import type { InterfaceSpec, VmSpec } from '../../vmm/spec.js';
import { Ipam } from './ipam.js';
import { gatewayOf, parseIpv4Range, type Ipv4Range } from './ipv4.js';
import { NodeNetwork } from './node-network.js';
import { MovedAddresses, type LendingSource, type LentAddress, type MovedClaims } from './moved-address.js';
import type { LentVmi } from './ipam.js';
import { MacClaims } from './mac-claims.js';
import type { PeerNode } from './peer-routes.js';
import type { VmPort } from './port-filter.js';
import {
  ensureVmNetwork,
  readVmPort,
  rejoinNodeBridge,
  GUEST_TAP,
  MASQUERADE_GATEWAY,
  MASQUERADE_GUEST,
  podIfaceMac,
  removeVmNetwork,
  vmNetworkNames,
} from './vm-network.js';

export type { LentAddress } from './moved-address.js';
import { withNetworkConfig } from './cloud-init-network.js';
import { links } from './host.js';
import { hostResolver, type GuestDns } from './resolver.js';

export const DEFAULT_BRIDGE = 'vkvm0';
const UNREADY_RECHECK_MS = 2_000;

export interface PodNetworkOptions {
  bridge: string;
  /** <stateDir>/network */
  dir: string;
  /** The node's pod range; polled until known (Node.spec.podCIDR). */
  podCidr: () => Promise<string | undefined>;
  /** This node's name (the peers' claims and lendings name nodes); '' for a node alone. */
  nodeName?: string;
  /** The other nodes, whose pod ranges are routed and let in (none: this node alone). */
  peers?: () => readonly PeerNode[];
  /**
   * Publishes the migrated VMs' addresses this node hosts and those of its
   * range it lends (its Node's vkvm.io/hosted-pod-ips and vkvm.io/lent-pod-ips);
   * none: nobody to tell.
   */
  publishMoved?: (claims: MovedClaims) => Promise<void>;
  /** Where the VMs of lent addresses run (their VMIs); none: lent to the node they were handed over to. */
  lending?: LendingSource;
  log: Logger;
}

/** A VM's place on the pod network. */
export interface VmAttachment {
  netnsPath: string;
  /** The pod address. */
  podIP: string;
  mac: string;
  interfaceName: string;
}

export class NetworkNotReadyError extends Error {
  readonly kind = 'NetworkNotReady';
}

export class PodNetwork {
  readonly node: NodeNetwork;
  private ready: { range: Ipv4Range; ipam: Ipam; dnsServers: string[] } | undefined;
  /** When the range was last found missing: VMs waiting for it do not each ask the API server. */
  private unreadyAtMs = 0;
  /** The repair under way, and the one asked for meanwhile: it runs next, once, for everyone who asked. */
  private repairing: Promise<void> | undefined;
  private nextRepair: Promise<void> | undefined;
  /** Per VM, the tail of its network operations: attach and detach of one VM never interleave. */
  private readonly inFlight = new Map<string, Promise<unknown>>();
  private closed = false;
  /** Which VM shows which MAC on the bridge. */
  private readonly macs: MacClaims;
  /** Migrated VMs' addresses: the records their routes are rebuilt from. */
  private readonly moved: MovedAddresses;

  constructor(private readonly o: PodNetworkOptions) {
    this.node = new NodeNetwork({ bridge: o.bridge, dir: o.dir, log: o.log });
    this.macs = new MacClaims(
      async () => (await this.recordedPorts()).map(({ uid, port }) => ({ uid, mac: port.mac })),
      async () => {
        const mac = (await readFile(`/sys/class/net/${o.bridge}/address`, 'utf8').catch(() => '')).trim();
        return new Map(mac ? [[mac, "the node bridge (the VMs' gateway)"]] : []);
      },
    );
    this.moved = new MovedAddresses({
      nodeName: o.nodeName ?? '',
      dir: o.dir,
      bridge: o.bridge,
      vmDir: (uid) => this.vmDir(uid),
      peers: () => o.peers?.() ?? [],
      ports: () => this.recordedPorts(),
      ...(o.publishMoved ? { publish: o.publishMoved } : {}),
      ...(o.lending ? { lending: o.lending } : {}),
      log: o.log,
    });
  }

  private vmDir(uid: string): string {
    return path.join(this.o.dir, 'vms', uid);
  }

  /**
   * Sets up the node's side once its range is known; until then VMs with a
   * NIC wait (NetworkNotReadyError, retried by the caller). Idempotent: later
   * calls repair the bridge, rules and DHCP server.
   */
  async ensureNode(): Promise<boolean> {
    if (this.closed) return false;
    if (!this.ready && Date.now() - this.unreadyAtMs < UNREADY_RECHECK_MS) return false;
    // A repair that has not started yet is shared; one under way may have read records older than the caller's change.
    const next = (this.nextRepair ??= (this.repairing ?? Promise.resolve()).then(() => {
      this.nextRepair = undefined;
      const run = this.repairNow();
      this.repairing = run.catch(() => undefined);
      return run;
    }));
    await next;
    return this.ready !== undefined;
  }

  private async repairNow(): Promise<void> {
    const cidr = await this.o.podCidr();
    if (!cidr) {
      if (!this.unreadyAtMs)
        this.o.log.warn(
          { bridge: this.o.bridge },
          'waiting for the node pod range (Node.spec.podCIDR); VMs with a NIC wait. Pass --pod-cidr if the controller manager does not allocate one',
        );
      this.unreadyAtMs = Date.now();
      return;
    }
    const range = parseIpv4Range(cidr, 'Node.spec.podCIDR');
    if (this.ready && this.ready.range.cidr !== range.cidr)
      throw new Error(`the node's pod range changed from ${this.ready.range.cidr} to ${range.cidr}; restart the agent`);
    // The lease file first: it refuses a new range while VMs hold addresses in the old one, before anything on the host changes.
    const ipam = this.ready?.ipam ?? (await Ipam.open(path.join(this.o.dir, 'leases.json'), range));
    // Read once: guests' DNS (in their cloud-init seeds too) must not change under running VMs.
    const dnsServers = this.ready?.dnsServers ?? (await hostResolver()).nameservers;
    const peers = this.o.peers?.() ?? [];
    const moved = await this.moved.network({ range, ipam }, peers);
    await this.node.ensure(range, dnsServers, peers, moved);
    await this.reattachVeths();
    await this.filterPorts();
    this.ready ??= { range, ipam, dnsServers };
    await this.moved.publish(moved.claims);
    this.o.log.debug({ cidr: range.cidr, bridge: this.o.bridge }, 'pod network ensured');
  }

  /**
   * A bridge the repair re-created (someone deleted it) has no ports: every
   * VM's veth goes back on it now, not when its pod next syncs, which for a
   * running VM may be never.
   */
  private async reattachVeths(): Promise<void> {
    const uids = await readdir(path.join(this.o.dir, 'vms')).catch(() => [] as string[]);
    const all = await links();
    for (const uid of uids) {
      const veth = all.get(vmNetworkNames(uid).hostVeth);
      if (veth && (await rejoinNodeBridge(veth, this.o.bridge))) {
        this.o.log.info({ vm: uid, veth: veth.ifname, bridge: this.o.bridge }, 'put a VM back on the re-created bridge');
      }
    }
  }

  /** The VMs' port records, by VM. */
  private async recordedPorts(): Promise<Array<{ uid: string; port: VmPort }>> {
    const uids = await readdir(path.join(this.o.dir, 'vms')).catch(() => [] as string[]);
    const ports = await Promise.all(uids.map(async (uid) => ({ uid, port: await readVmPort(this.vmDir(uid)) })));
    return ports.filter((p): p is { uid: string; port: VmPort } => p.port !== undefined);
  }

  /** Makes the bridge's port filter match the VMs' port records. */
  private filterPorts(): Promise<void> {
    return this.node.ports.ensure(async () => (await this.recordedPorts()).map((p) => p.port));
  }

  /**
   * Stops all network work; waits for what is under way. `removeAll` (vkvm up,
   * whose VMs were stopped) then removes every VM's network and the node's.
   */
  async close(opts: { removeAll: boolean }): Promise<void> {
    this.closed = true;
    await this.nextRepair?.catch(() => undefined);
    await this.repairing;
    await Promise.all(this.inFlight.values());
    this.node.dhcpAcks.close();
    if (!opts.removeAll) return;
    await this.retainOnly(() => false);
    await this.node.remove();
  }

  private serialized<T>(uid: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.inFlight.get(uid) ?? Promise.resolve()).then(fn, fn);
    const tail = run.catch(() => undefined);
    this.inFlight.set(uid, tail);
    void tail.then(() => {
      if (this.inFlight.get(uid) === tail) this.inFlight.delete(uid);
    });
    return run;
  }

  /**
   * The spec with its interface wired to the VM's tap; VMs without NICs need
   * nothing. `dns`: the guest's resolver (the pod's DNS policy); the node's
   * nameservers when absent.
   */
  attach(spec: VmSpec, dns?: GuestDns): Promise<{ spec: VmSpec; attachment?: VmAttachment }> {
    return this.serialized(spec.uid, () => this.attachNow(spec, dns));
  }

  /**
   * Target side of a migration, before any bytes move (design §3 step 4): as
   * attach(), for an address this node does not own (lent by the VM's home
   * node, or its own, lent out earlier): namespace, veth, tap, port record,
   * MAC claim and DHCP for the home range; no route to it yet, so traffic
   * still reaches the VM where it runs. Idempotent; a later attach() of the
   * VM keeps the address. Undo with detach() (a failed migration).
   */
  attachIncoming(spec: VmSpec, lent: LentAddress, dns?: GuestDns): Promise<{ spec: VmSpec; attachment?: VmAttachment }> {
    return this.serialized(spec.uid, () => this.attachNow(spec, dns, lent));
  }

  private async attachNow(spec: VmSpec, given?: GuestDns, lent?: LentAddress): Promise<{ spec: VmSpec; attachment?: VmAttachment }> {
    if (spec.interfaces.length === 0) return { spec };
    if (this.closed) throw new NetworkNotReadyError('the agent is stopping');
    if (spec.interfaces.length > 1) {
      throw new SpecError([
        {
          path: 'interfaces[1]',
          reason: 'FieldValueNotSupported',
          message: 'a VM has one interface on the pod network; vkvm has no secondary networks',
        },
      ]);
    }
    if (!this.ready && !(await this.ensureNode())) throw new NetworkNotReadyError('the node has no pod range yet (Node.spec.podCIDR)');
    const { ipam, dnsServers } = this.ready!;
    const adopted = await this.moved.adoptedAddress(spec.uid, lent, this.ready!);
    const range = adopted?.range ?? this.ready!.range;
    const dns = given ?? { nameservers: dnsServers, searches: [] };
    const iface: InterfaceSpec = { ...spec.interfaces[0]!, tapDevice: GUEST_TAP };
    // Before anything is made for the VM: the MAC its port will show on the bridge (a masquerade guest's stays in its namespace).
    if (iface.binding === 'bridge') await this.macs.claim(spec.uid, iface.mac, 'interfaces[0].mac');
    else await this.macs.claim(spec.uid, podIfaceMac(spec.uid), 'interfaces[0]');
    const podIP = adopted?.podIP ?? (await ipam.lease(spec.uid));
    const names = await ensureVmNetwork({
      uid: spec.uid,
      iface,
      podIP,
      prefixLength: range.prefixLength,
      gateway: gatewayOf(range),
      dns,
      nodeBridge: this.o.bridge,
      dir: this.vmDir(spec.uid),
      dhcpScript: this.node.dhcpAcks.script,
    });
    // Before the VM runs: its first frame is filtered. A port already recorded is in the filter, which
    // the periodic repair keeps (ensureNode): a sync of a running VM starts no nft process.
    if (names.portRecorded) await this.filterPorts();
    // DHCP for its home range before its host entry, which dnsmasq would refuse outside every range it serves.
    if (adopted && names.portRecorded) await this.ensureNode();
    if (iface.binding === 'bridge') await this.node.addDhcpHost(spec.uid, iface.mac, podIP, dns);
    const guest =
      iface.binding === 'bridge'
        ? { address: `${podIP}/${range.prefixLength}`, gateway: gatewayOf(range) }
        : { address: `${MASQUERADE_GUEST}/24`, gateway: MASQUERADE_GATEWAY };
    const disks = withNetworkConfig(spec.disks, { mac: iface.mac, ...guest, dns });
    return {
      spec: { ...spec, interfaces: [iface], disks },
      attachment: { netnsPath: names.netnsPath, podIP, mac: iface.mac, interfaceName: iface.name },
    };
  }

  /**
   * Target side at commit, before the guest resumes (§6 order): routes the
   * VM's address to its port (a /32 on the bridge, and a neighbour entry so
   * the first packets need no ARP), and back home turns the lent lease into
   * the VM's own. Resolves once routed; publishing the address as hosted here
   * (the Node annotation the other nodes route by) follows at once, in the
   * background, retried by the repair. Idempotent.
   */
  claimMovedAddress(uid: string): Promise<void> {
    return this.serialized(uid, async () => {
      await this.moved.claim(uid, await this.readyNode());
      this.repairSoon();
    });
  }

  /**
   * Source side after the target's ack (§3 step 15): routes the VM's address
   * via the node it moved to (`to.address`: its InternalIP), then drops the
   * VM's bridge port, filter chain, MAC claim and DHCP entry; on the home
   * node the lease stays, lent to `to.node` (and where the VM's VMI, `to.vmi`,
   * says it runs later), until the VM runs nowhere. The namespace stays
   * until detach(), which then releases nothing. Idempotent.
   */
  handOverAddress(uid: string, to: { node: string; address: string; vmi?: LentVmi }): Promise<void> {
    return this.serialized(uid, async () => {
      await this.moved.handOver(uid, to, await this.readyNode(), async () => {
        await rm(path.join(this.vmDir(uid), 'port.json'), { force: true });
        await this.filterPorts();
        this.macs.release(uid);
        await this.node.removeDhcpHost(uid);
      });
      this.repairSoon();
    });
  }

  /** The node's range and leases, once known (an agent just restarted may not have read them yet). */
  private async readyNode(): Promise<{ range: Ipv4Range; ipam: Ipam }> {
    if (!this.ready && !(await this.ensureNode())) throw new NetworkNotReadyError('the node has no pod range yet (Node.spec.podCIDR)');
    return this.ready!;
  }

  /** A repair now, not awaited (records changed); a failure waits for the periodic one. */
  private repairSoon(): void {
    this.ensureNode().catch((err: unknown) => this.o.log.warn({ err }, 'pod network repair failed; the next one retries'));
  }

  /** The pod address of a VM on this node, from its port record (the address its port filter lets out). */
  async addressOf(uid: string): Promise<string | undefined> {
    return (await readVmPort(this.vmDir(uid)))?.ip;
  }

  /** When the VM's guest last took its address by DHCP here, Unix ms (dhcp-acks.ts); undefined if it never did. */
  guestDhcpAckedAt(uid: string): Promise<number | undefined> {
    return this.node.dhcpAcks.ackedAtUnixMs(uid);
  }

  /** Calls `listener` with the uid of each VM whose guest takes its address by DHCP from now on. */
  onGuestDhcp(listener: (uid: string) => void): () => void {
    return this.node.dhcpAcks.onAck(listener);
  }

  /** Removes the VM's namespace, port filter, DHCP entry and record, and lease. Idempotent; call once its launcher is gone. */
  detach(uid: string): Promise<void> {
    return this.serialized(uid, async () => {
      const adopted = await this.moved.incoming(uid);
      await removeVmNetwork(uid, this.vmDir(uid));
      this.macs.release(uid);
      // Without a node set up here (vkvm reset), the node's removal takes the whole filter.
      if (this.ready) await this.filterPorts();
      await this.node.removeDhcpHost(uid);
      await this.node.dhcpAcks.forget(uid);
      // A lent lease is kept while its VM runs elsewhere; the sweep releases it (MovedAddresses.sweep).
      if (!this.ready?.ipam.lent()[uid]) await this.ready?.ipam.release(uid);
      // Its /32 and its entry in the hosted addresses go with it.
      if (adopted && this.ready) await this.ensureNode();
    });
  }

  /**
   * Detaches every VM `inUse` says no to (asked per VM, at the moment of the
   * decision, so a VM attached meanwhile is kept): what a crash between a
   * VM's removal and its detach left behind.
   */
  async retainOnly(inUse: (uid: string) => boolean): Promise<string[]> {
    const lent = this.ready?.ipam.lent() ?? {};
    const known = new Set([
      ...(await readdir(path.join(this.o.dir, 'vms')).catch(() => [] as string[])),
      ...(await readdir(this.node.dhcpHostsDir).catch(() => [] as string[])),
      ...(await readdir(this.node.dhcpOptsDir).catch(() => [] as string[])),
      ...(await this.node.dhcpAcks.recorded()),
      ...Object.keys(this.ready?.ipam.leases() ?? {}).filter((owner) => !lent[owner]),
    ]);
    const removed: string[] = [];
    for (const uid of known) {
      if (inUse(uid)) continue;
      this.o.log.info({ vm: uid, netns: vmNetworkNames(uid).netns }, 'removing the network of a VM that no longer exists');
      await this.detach(uid);
      removed.push(uid);
    }
    // Lent leases no node hosts any more, and handed-over routes the peers' annotations replaced.
    if (this.ready && (await this.moved.sweep(this.ready, this.o.peers?.() ?? []))) await this.ensureNode();
    return removed;
  }
}

// What a node agent's VMs leave behind on the host and in the cluster, for
// the leak audit (npm run bench -- leaks) and its CI e2e (test/e2e/leaks).
// A footprint is everything of one agent that a VM could leave, as sorted
// lines per kind; what a run of create/delete cycles leaked is what the
// footprint after it has that the one before did not (the agent itself and
// its node network are in both; settledFootprint samples between two DHCP
// server restarts, as a VM removal restarts it). Take the first footprint after one VM came
// and went, so what the first VM creates for all later ones (the network's
// VM directory, say) is not counted.
import { readdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { KubeClients } from '../../provider/kube/client.js';
import { runningPid } from '../../provider/network/dnsmasq.js';
import { run } from '../../provider/network/host.js';
import { portFilterTable } from '../../provider/network/port-filter.js';
import { NETNS_DIR } from '../../provider/network/vm-network.js';
import { DEFAULTS as LAUNCHER_DEFAULTS } from '../../launcher/args.js';
import { argvOf } from './processes.js';
import { poll } from '../e2e/framework/wait.js';

/** The agent whose VMs are audited. */
export interface AuditedAgent {
  stateDir: string;
  runDir: string;
  bridge: string;
  /** Its image store, which keeps pulled images by design; default <stateDir>/images. */
  imageStoreDir?: string;
}

/** Lines per kind of thing, each sorted. */
export type Footprint = Record<string, string[]>;

const CGROUP_ROOT = '/sys/fs/cgroup';

const orEmpty = <T>(p: Promise<T[]>): Promise<T[]> => p.catch(() => [] as T[]);

/** Processes of the agent or its VMs: their command line names its dirs or bridge, or they sit in a launcher's cgroup. */
async function processes(a: AuditedAgent): Promise<string[]> {
  const out: string[] = [];
  const marks = [a.stateDir, a.runDir, a.bridge];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const argv = argvOf(Number(name));
    if (argv.length === 0) continue;
    const cgroups = await readFile(`/proc/${name}/cgroup`, 'utf8').catch(() => '');
    const inLauncherCgroup = new RegExp(`:/${LAUNCHER_DEFAULTS.cgroupParent}/[^/\\n]+`).test(cgroups);
    if (!inLauncherCgroup && !marks.some((m) => argv.some((arg) => arg.includes(m)))) continue;
    // Without the pid: the same process before and after is one line; a long QEMU command line is cut.
    out.push(argv.join(' ').slice(0, 240));
  }
  return out;
}

/** Launcher cgroups, in every hierarchy. */
async function cgroups(): Promise<string[]> {
  const out: string[] = [];
  for (const hierarchy of ['', ...(await orEmpty(readdir(CGROUP_ROOT)))]) {
    const parent = path.join(CGROUP_ROOT, hierarchy, LAUNCHER_DEFAULTS.cgroupParent);
    for (const entry of await orEmpty(readdir(parent, { withFileTypes: true }))) {
      if (entry.isDirectory()) out.push(path.join(hierarchy || '(unified)', LAUNCHER_DEFAULTS.cgroupParent, entry.name));
    }
  }
  return out;
}

/** VM network namespaces (vkvm-<uid>). */
async function namespaces(): Promise<string[]> {
  return (await orEmpty(readdir(NETNS_DIR))).filter((n) => n.startsWith('vkvm-'));
}

/** Ports on the agent's bridge: VMs' host veths. */
function bridgePorts(a: AuditedAgent): Promise<string[]> {
  return orEmpty(readdir(`/sys/class/net/${a.bridge}/brif`));
}

/** The chains of the bridge's port filter, and any other nftables table named for vkvm. */
async function nftables(a: AuditedAgent): Promise<string[]> {
  const table = portFilterTable(a.bridge);
  const listing = await run(['nft', 'list', 'table', 'bridge', table]).catch(() => '');
  const chains = [...listing.matchAll(/^\s*chain (\S+) \{/gm)].map((m) => `bridge ${table} chain ${m[1]}`);
  const tables = (await run(['nft', 'list', 'tables']).catch(() => ''))
    .split('\n')
    .filter((l) => l.includes('vkvm'))
    .map((l) => l.trim());
  return [...tables, ...chains];
}

/** iptables rules naming the bridge or its chains; a rule there twice is two lines (#2). */
async function iptablesRules(a: AuditedAgent): Promise<string[]> {
  const seen = new Map<string, number>();
  let table = '';
  const out: string[] = [];
  for (const line of (await run(['iptables-save']).catch(() => '')).split('\n')) {
    if (line.startsWith('*')) table = line.slice(1);
    if (!line.startsWith('-A ') || !line.includes(a.bridge)) continue;
    const key = `${table} ${line}`;
    const n = (seen.get(key) ?? 0) + 1;
    seen.set(key, n);
    out.push(n === 1 ? key : `${key} #${n}`);
  }
  return out;
}

/** Addresses the agent's IPAM holds, by owner. */
async function ipamLeases(a: AuditedAgent): Promise<string[]> {
  const text = await readFile(path.join(a.stateDir, 'network', 'leases.json'), 'utf8').catch(() => '');
  const leases = text ? ((JSON.parse(text) as { leases?: Record<string, string> }).leases ?? {}) : {};
  return Object.entries(leases).map(([owner, ip]) => `${ip} held by ${owner}`);
}

/**
 * Leases the node's DHCP server handed out and still holds, from its log:
 * an address acknowledged to a MAC and neither released nor dropped by a
 * restart since (leasefile-ro: dnsmasq keeps leases in memory only, and the
 * agent restarts it when it removes a VM's entry).
 */
async function dhcpLeases(a: AuditedAgent): Promise<string[]> {
  const log = await readFile(path.join(a.stateDir, 'network', 'dnsmasq.log'), 'utf8').catch(() => '');
  const held = new Map<string, boolean>();
  for (const m of log.matchAll(/DHCP(ACK|RELEASE)\([^)]*\) (\d+\.\d+\.\d+\.\d+) ([0-9a-f:]{17})|: started, version /g)) {
    if (!m[1]) held.clear();
    else held.set(`${m[2]} ${m[3]}`, m[1] === 'ACK');
  }
  return [...held].filter(([, live]) => live).map(([lease]) => lease);
}

/** Unix sockets bound below the agent's dirs. */
async function sockets(a: AuditedAgent): Promise<string[]> {
  const table = await readFile('/proc/net/unix', 'utf8').catch(() => '');
  const paths = table
    .split('\n')
    .slice(1)
    .map((l) => l.trim().split(/\s+/)[7] ?? '')
    .filter((p) => p.startsWith(`${a.stateDir}/`) || p.startsWith(`${a.runDir}/`));
  return [...new Set(paths)];
}

/** Every file and directory below the agent's dirs but its log and its image store. */
async function files(a: AuditedAgent): Promise<string[]> {
  const skip = new Set([path.join(a.stateDir, 'agent.log'), a.imageStoreDir ?? path.join(a.stateDir, 'images')]);
  const out = new Set<string>();
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await orEmpty(readdir(dir, { withFileTypes: true }))) {
      const p = path.join(dir, entry.name);
      if (skip.has(p)) continue;
      out.add(p);
      if (entry.isDirectory()) await walk(p);
    }
  };
  await walk(a.stateDir);
  if (!(await stat(a.runDir).catch(() => undefined))?.isDirectory()) return [...out];
  await walk(a.runDir);
  return [...out];
}

/** The agent's footprint on the host now. */
export async function hostFootprint(a: AuditedAgent): Promise<Footprint> {
  const kinds: Footprint = {
    process: await processes(a),
    cgroup: await cgroups(),
    'network namespace': await namespaces(),
    'bridge port': await bridgePorts(a),
    nftables: await nftables(a),
    iptables: await iptablesRules(a),
    'IPAM address': await ipamLeases(a),
    'DHCP lease': await dhcpLeases(a),
    socket: await sockets(a),
    file: await files(a),
  };
  for (const k of Object.keys(kinds)) kinds[k]!.sort();
  return kinds;
}

/**
 * The host footprint between two restarts of the node's DHCP server. A VM's
 * removal restarts it after the VM's directories are gone, and mid-restart
 * the new dnsmasq runs before it wrote its pid file: sampled then, the pid
 * file would look made by the cycles. So the footprint counts only when the
 * same running dnsmasq was named by its pid file before and after it.
 */
export async function settledFootprint(a: AuditedAgent): Promise<Footprint> {
  const dhcp = { confFile: path.join(a.stateDir, 'network', 'dnsmasq.conf'), pidFile: path.join(a.stateDir, 'network', 'dnsmasq.pid') };
  const sample = await poll(
    "a footprint between two restarts of the node's DHCP server",
    async () => {
      const pid = await runningPid(dhcp);
      const footprint = await hostFootprint(a);
      return { footprint, steady: pid !== undefined && pid === (await runningPid(dhcp)) };
    },
    (s) => s.steady,
    { deadlineMs: 30_000 },
  );
  return sample.footprint;
}

/** The VM objects left in a namespace: pods, VirtualMachineInstances, VirtualMachines. */
export async function kubeFootprint(clients: KubeClients, namespace: string): Promise<Footprint> {
  const pods = (await clients.core.listNamespacedPod({ namespace })).items.map((p) => `pod ${namespace}/${p.metadata?.name}`);
  const custom = async (plural: string): Promise<string[]> => {
    const list = (await clients.custom
      .listNamespacedCustomObject({ group: 'kubevirt.io', version: 'v1', namespace, plural })
      .catch(() => ({ items: [] }))) as { items: Array<{ metadata?: { name?: string } }> };
    return list.items.map((o) => `${plural} ${namespace}/${o.metadata?.name}`);
  };
  return { 'Kubernetes object': [...pods, ...(await custom('virtualmachineinstances')), ...(await custom('virtualmachines'))].sort() };
}

/** What `after` holds that `before` did not, as "<kind>: <line>". */
export function leftSince(before: Footprint, after: Footprint): string[] {
  const out: string[] = [];
  for (const [kind, lines] of Object.entries(after)) {
    const had = new Set(before[kind] ?? []);
    for (const line of lines) if (!had.has(line)) out.push(`${kind}: ${line}`);
  }
  return out;
}

// Where each node of `vkvm up --nodes N` lives: its name, its address on
// the nodes' segment, its network namespace and its private directories,
// all derived from its index, so a restart on the same state dir finds the
// same nodes. Node 1 is this host as `vkvm up` always ran it; nodes 2..N
// are simulated hosts. Pure: nothing here touches the machine.
import { join } from 'node:path';
import { ConfigError } from '../config.js';
import { QEMU_UID_BASE, QEMU_UID_COUNT } from '../launchers/qemu-uids.js';
import { gatewayOf, intToIp, parseIpv4Range, type Ipv4Range } from '../network/ipv4.js';

/** The layer-2 segment every node has an address on: a bridge in this host's namespace. */
export interface Segment {
  bridge: string;
  range: Ipv4Range;
  /** This host's address on it: node 1's InternalIP and the control plane's. */
  hostAddress: string;
}

/** One simulated host (node 2..N). */
export interface LocalNode {
  /** 2..N. */
  index: number;
  name: string;
  /** Its one address, on the segment. */
  address: string;
  /** Its network namespace (/run/netns/<netns>). */
  netns: string;
  /** Its end of the veth pair on the segment bridge (the other end is eth0 in netns). */
  hostVeth: string;
  /**
   * Everything persistent of the node, <up state dir>/nodes/<index>: its
   * state dir, and its caches in cache/. By index, not name: QEMU's socket
   * paths below it must fit in 107 bytes.
   */
  rootDir: string;
  stateDir: string;
  imageCacheDir: string;
  libvirtCacheDir: string;
  /** Volatile: launcher sockets, <up run dir>/nodes/<index>. */
  runDir: string;
  /** Its VMs' cgroups sit below this, apart from node 1's. */
  cgroupParent: string;
  /** Its QEMU uid range, apart from every other node's. */
  qemuUidBase: number;
}

export const SEGMENT_BRIDGE = 'vkvm-nodes';
/** A private range unlikely to be a host's own LAN, and apart from the pod and service ranges. */
export const DEFAULT_NODES_CIDR = '192.168.250.0/24';
export const MAX_NODES = 64;
export const NODES_DIR = 'nodes';
/** Node i's VM cgroups are <this>/node-<i>/<pod uid>, beside node 1's <this>/<pod uid>. */
export const NODES_CGROUP_PARENT = 'vkvm';
export const nodeCgroupParent = (index: number): string => `${NODES_CGROUP_PARENT}/node-${index}`;

export function segmentOf(cidr: string): Segment {
  let range: Ipv4Range;
  try {
    range = parseIpv4Range(cidr, '--nodes-cidr');
  } catch (err) {
    throw new ConfigError('--nodes-cidr', (err as Error).message.replace(/^--nodes-cidr: /, ''));
  }
  return { bridge: SEGMENT_BRIDGE, range, hostAddress: gatewayOf(range) };
}

export function parseNodeCount(value: string | undefined): number {
  if (value === undefined) return 1;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_NODES) {
    throw new ConfigError('--nodes', `must be an integer in [1, ${MAX_NODES}], got ${JSON.stringify(value)}`);
  }
  return n;
}

/** The name of node `index` (2..N) beside node 1's. */
export function nodeName(node1: string, index: number): string {
  return `${node1}-${index}`;
}

/** Nodes 2..count: the host's address is the segment's first, node i's the i-th. */
export function localNodes(o: { count: number; node1: string; segment: Segment; upStateDir: string; upRunDir: string }): LocalNode[] {
  const size = o.segment.range.broadcast - o.segment.range.network - 1;
  if (o.count > size) throw new ConfigError('--nodes', `${o.count} nodes do not fit in --nodes-cidr ${o.segment.range.cidr}`);
  const out: LocalNode[] = [];
  for (let index = 2; index <= o.count; index++) {
    const name = nodeName(o.node1, index);
    const rootDir = join(o.upStateDir, NODES_DIR, String(index));
    out.push({
      index,
      name,
      address: intToIp(o.segment.range.network + index),
      netns: `vkvm-node-${index}`,
      hostVeth: `vkvmnode${index}`,
      rootDir,
      stateDir: rootDir,
      imageCacheDir: join(rootDir, 'cache', 'images'),
      libvirtCacheDir: join(rootDir, 'cache', 'libvirt'),
      runDir: join(o.upRunDir, NODES_DIR, String(index)),
      cgroupParent: nodeCgroupParent(index),
      qemuUidBase: QEMU_UID_BASE + (index - 1) * QEMU_UID_COUNT,
    });
  }
  return out;
}

/** The node's image store: its agent's default, <state dir>/images. */
export const imageStoreOf = (node: LocalNode): string => join(node.stateDir, 'images');

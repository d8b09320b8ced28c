// `vkvm up --nodes N`: what the flag changes in vkvm up. With N > 1 the
// control plane and node 1 sit on the nodes' segment (the host's address on
// it), and nodes 2..N are simulated hosts joined through `vkvm join`
// (provider/local-cluster/). Node 1 stays this host, as with one node: the
// README's single-node run is unchanged; node 1's agent runs as its node
// identity (provider/certs/node-credentials.ts), the controllers as admin.
// `--container-nodes M` adds M ordinary nodes after them on the same segment
// (containerd and the real kubelet, flannel host-gw; provider/local-cluster/).
import { ConfigError, type AgentConfig } from '../config.js';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { AGENT_OPTIONS } from './agent-flags.js';
import { agentArgsOf } from './join.js';
import {
  DEFAULT_NODES_CIDR,
  localNodes,
  MAX_NODES,
  parseNodeCount,
  segmentOf,
  type LocalNode,
  type Segment,
} from '../local-cluster/layout.js';
import { ensureSegment, removeSegment } from '../local-cluster/segment.js';
import { removeStaleNodes, startLocalNodes, type RunningLocalNodes } from '../local-cluster/hosts.js';
import { startContainerNodes } from '../local-cluster/container-hosts.js';
import { defaultCacheDir } from '../../deploy/cluster/cluster.js';
import { dirname } from 'node:path';
import { LOCAL_CLUSTER_DNS_IP } from '../cluster-services/cluster-dns-config.js';
import type { NodeStorageOf } from '../node-storage/node-storage-spec.js';

export const NODES_OPTIONS = {
  nodes: { type: 'string' },
  'nodes-cidr': { type: 'string' },
  'container-nodes': { type: 'string' },
} as const;

/** The local control plane's pod network (vkvm-cluster up's default) and its DNS domain. */
export const LOCAL_CLUSTER_CIDR = '10.244.0.0/16';
export const LOCAL_CLUSTER_DOMAIN = 'cluster.local';

export const NODES_HELP = `  --nodes N         nodes in the local cluster (default 1): this host, plus
                    N-1 simulated hosts, each a network namespace on a
                    segment shared with this host, joined with vkvm join
  --nodes-cidr CIDR the nodes' segment (default ${DEFAULT_NODES_CIDR}); this
                    host takes its first address, node i the i-th
  --container-nodes M
                    ordinary nodes after the vkvm nodes (default 0): each a
                    simulated host running containerd and the kubelet, with
                    flannel (host-gw) routing pod ranges between nodes
`;

/** Agent flags that are each node's own, so not handed to nodes 2..N. */
const PER_NODE_FLAGS = new Set([
  'node-name',
  'run-dir',
  'image-cache-dir',
  'image-store-dir',
  'plugin-registry-dir',
  'kubelet-port',
  'kubelet-bind-address',
  'healthz-port',
  'internal-ip',
  'pod-cidr',
  'bridge',
  'cgroup-parent',
  'qemu-uid-base',
  'log-level',
]);

export interface NodesPlan {
  count: number;
  containerNodes: number;
  /** Only with more than one node. */
  segment?: Segment;
}

function parseContainerNodes(value: string | undefined): number {
  if (value === undefined) return 0;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > MAX_NODES)
    throw new ConfigError('--container-nodes', `must be an integer in [0, ${MAX_NODES}], got ${JSON.stringify(value)}`);
  return n;
}

/** Checks --nodes against the other flags of vkvm up; `values` are its parsed flags. */
export function nodesPlan(values: Record<string, unknown>): NodesPlan {
  const count = parseNodeCount(values.nodes as string | undefined);
  const containerNodes = parseContainerNodes(values['container-nodes'] as string | undefined);
  if (values['nodes-cidr'] !== undefined && count + containerNodes === 1)
    throw new ConfigError('--nodes-cidr', 'applies only with --nodes 2 or more, or container nodes');
  if (count + containerNodes === 1) return { count, containerNodes };
  if (values.kubeconfig) throw new ConfigError('--nodes', 'simulated hosts join the local control plane; with --kubeconfig there is none');
  if (values['internal-ip'])
    throw new ConfigError('--internal-ip', "with --nodes 2 or more, this host's InternalIP is its address on the nodes' segment");
  const address = values['control-plane-address'] as string | undefined;
  if (address?.startsWith('127.'))
    throw new ConfigError('--control-plane-address', 'must be an address the simulated hosts reach, not loopback');
  return { count, containerNodes, segment: segmentOf((values['nodes-cidr'] as string | undefined) ?? DEFAULT_NODES_CIDR) };
}

/** The nodes beyond this host: vkvm nodes 2..N, then the container nodes. */
export function extraNodes(plan: NodesPlan, config: AgentConfig, upStateDir: string): { vkvm: LocalNode[]; container: LocalNode[] } {
  if (!plan.segment) return { vkvm: [], container: [] };
  const all = localNodes({
    count: plan.count + plan.containerNodes,
    node1: config.nodeName,
    segment: plan.segment,
    upStateDir,
    upRunDir: config.runDir,
  });
  return { vkvm: all.slice(0, plan.count - 1), container: all.slice(plan.count - 1) };
}

export const prepareSegment = (plan: NodesPlan): Promise<void> => (plan.segment ? ensureSegment(plan.segment) : Promise.resolve());
export const removeSegmentOf = (plan: NodesPlan): Promise<void> => (plan.segment ? removeSegment(plan.segment) : Promise.resolve());

/** Removes nodes of an earlier, larger run, then starts nodes 2..N and the container nodes. */
export async function startExtraNodes(o: {
  plan: NodesPlan;
  nodes: { vkvm: LocalNode[]; container: LocalNode[] };
  config: AgentConfig;
  upStateDir: string;
  values: Record<string, unknown>;
  clients: KubeClients;
  adminKubeconfig: string;
  server: string;
  importImages: (imageStoreDir: string) => Promise<void>;
  /** The vkvm nodes' CSI driver and provisioner, with the local control plane. */
  storageOf?: NodeStorageOf;
  /** vkvm-cluster, whose kube-proxy every node runs (absent: no local control plane, so no other nodes). */
  clusterBinary?: string;
  log: Logger;
  signal: AbortSignal;
}): Promise<RunningLocalNodes | undefined> {
  const log = o.log.child({ component: 'local-nodes' });
  const keep = [...o.nodes.vkvm, ...o.nodes.container];
  await removeStaleNodes({ keep, upStateDir: o.upStateDir, upRunDir: o.config.runDir, clients: o.clients, log });
  if (!o.plan.segment || keep.length === 0) return undefined;
  const shared = Object.fromEntries(Object.entries(o.values).filter(([k]) => !PER_NODE_FLAGS.has(k) && k in AGENT_OPTIONS));
  const vkvm = await startLocalNodes(
    {
      nodes: o.nodes.vkvm,
      segment: o.plan.segment,
      adminKubeconfig: o.adminKubeconfig,
      server: o.server,
      agentArgs: [
        ...agentArgsOf(shared),
        ...(shared['kube-proxy'] === 'false' || !o.clusterBinary ? [] : [`--kube-proxy-binary=${o.clusterBinary}`]),
      ],
      // /var/cache whole: node 1's caches (its images, its libvirt cache) and the host's.
      hidden: [o.upStateDir, o.config.runDir, o.config.imageCacheDir, o.config.imageStoreDir, '/var/cache'],
      shared: o.clusterBinary ? [dirname(o.clusterBinary)] : [],
      importImages: o.importImages,
      ...(o.storageOf ? { storageOf: o.storageOf } : {}),
      gracePeriodS: 10,
      logLevel: o.config.logLevel,
      log,
    },
    o.signal,
  );
  const container = await startContainerNodes(
    {
      nodes: o.nodes.container,
      segment: o.plan.segment,
      clients: o.clients,
      server: o.server,
      clusterCidr: LOCAL_CLUSTER_CIDR,
      clusterDns: [LOCAL_CLUSTER_DNS_IP],
      clusterDomain: LOCAL_CLUSTER_DOMAIN,
      cacheDir: defaultCacheDir(),
      logLevel: o.config.logLevel,
      log: o.log.child({ component: 'container-nodes' }),
    },
    o.signal,
  ).catch(async (err: unknown) => {
    await vkvm.stop();
    throw err;
  });
  return { stop: () => Promise.all([container.stop(), vkvm.stop()]).then(() => undefined) };
}

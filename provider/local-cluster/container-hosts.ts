// This host's side of the container nodes of `vkvm up --container-nodes M`:
// a bootstrap token for their kubelets (as `vkvm token create` makes one), the
// control plane's binaries and the local images (both built once, cached by
// hash), each node's namespace on the segment and its init process
// (container-node.ts), started and, on stop, stopped before its namespace goes.
import { ensureClusterBinaries } from '../../deploy/cluster/cluster.js';
import { ensureLocalImages, PAUSE_IMAGE } from '../images/local-images.js';
import { createJoinToken } from '../join/token-create.js';
import { applyManifests } from '../kube/apply.js';
import { clusterCaData, type KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { cgroupMounts } from './cgroup-mounts.js';
import { CONTAINER_NODE_READY, type ContainerNodeSpec } from './container-node-spec.js';
import { startHostInit, stopHostInit, type StartedHost } from './host-init.js';
import type { LocalNode, Segment } from './layout.js';
import type { RunningLocalNodes } from './hosts.js';
import { createNodeNetns } from './segment.js';
import { KUBE_PROXY_CONFIG_KEY, localKubeProxyConfigMap } from '../cluster-services/kube-proxy-config.js';

export interface ContainerNodesOptions {
  nodes: LocalNode[];
  segment: Segment;
  clients: KubeClients;
  /** The API server URL as the nodes reach it. */
  server: string;
  clusterCidr: string;
  clusterDns: string[];
  clusterDomain: string;
  cacheDir: string;
  logLevel: string;
  log: Logger;
}

const CONTAINER_NODE = new URL('./container-node.js', import.meta.url).pathname;
/** Each node's cgroup subtree, beside the vkvm nodes' VM cgroups. */
export const containerNodeCgroup = (node: LocalNode): string => `vkvm/cnode-${node.index}`;

/**
 * What flanneld needs beyond a node's own rights, granted to each container
 * node's user (flanneld runs with the kubelet's credentials, as a host
 * process): every Node's podCIDR and annotations (the Node authorizer lets a
 * node read only its own) and writing its own annotations (NodeRestriction
 * keeps that to its own Node). Flannel's DaemonSet grants its pods the same.
 */
export function flannelRbac(nodeNames: string[]): object[] {
  return [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'vkvm:flannel' },
      rules: [
        { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
        { apiGroups: [''], resources: ['nodes/status'], verbs: ['patch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'vkvm:flannel' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'vkvm:flannel' },
      subjects: nodeNames.map((name) => ({ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: `system:node:${name}` })),
    },
  ];
}

/** Starts the container nodes one after another (each starts containerd and a kubelet on a shared CPU). */
export async function startContainerNodes(o: ContainerNodesOptions, signal: AbortSignal): Promise<RunningLocalNodes> {
  const started: StartedHost[] = [];
  const stop = async () => {
    await Promise.all(started.map((h) => stopHostInit(h, o.log)));
  };
  try {
    if (o.nodes.length === 0) return { stop };
    const bins = await ensureClusterBinaries(o.log, o.cacheDir, signal);
    const imagesLayout = await ensureLocalImages(bins, o.cacheDir);
    const { token } = await createJoinToken(o.clients, { ttlS: 3600, description: 'vkvm up --container-nodes', server: o.server }, o.log);
    const caData = await clusterCaData(o.clients.kc);
    await applyManifests(o.clients, flannelRbac(o.nodes.map((n) => n.name)) as never);
    const cgroups = await cgroupMounts();
    for (const node of o.nodes) {
      signal.throwIfAborted();
      await createNodeNetns(node, o.segment);
      const spec: ContainerNodeSpec = {
        name: node.name,
        address: node.address,
        rootDir: node.rootDir,
        runDir: node.runDir,
        binary: bins.cluster,
        imagesLayout,
        pauseImage: PAUSE_IMAGE,
        server: o.server,
        caData,
        token: `${token.id}.${token.secret}`,
        clusterCidr: o.clusterCidr,
        clusterDns: o.clusterDns,
        kubeProxyConfig: localKubeProxyConfigMap(o.clusterCidr).data[KUBE_PROXY_CONFIG_KEY]!,
        clusterDomain: o.clusterDomain,
        cgroupBase: containerNodeCgroup(node),
        cgroups,
        logLevel: o.logLevel,
      };
      started.push(await startHostInit(node, { script: CONTAINER_NODE, spec, readyMessage: CONTAINER_NODE_READY, signal }));
      o.log.info({ node: node.name, address: node.address }, 'container node joined');
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { stop };
}

// The node's pod network as the agent runs it: the Node informer that gives
// the other nodes' ranges and moved addresses, the VMIs behind this node's
// lent addresses, and the PodNetwork kept in step with both.
import type { V1Node } from '@kubernetes/client-node';
import { join } from 'node:path';
import type { AgentConfig } from '../config.js';
import type { KubeClients } from '../kube/client.js';
import { ClusterInformer } from '../kube/informer.js';
import type { Logger } from '../log.js';
import { LentVmis } from '../migration/lent-vmis.js';
import { publishMovedPodIps } from '../node/hosted-pod-ips.js';
import { ipv4PodCidrOf, peersOf } from './peer-routes.js';
import { PodNetwork } from './pod-network.js';

export interface NodePodNetworkOptions {
  config: Pick<AgentConfig, 'bridge' | 'stateDir' | 'podCidr' | 'nodeName'>;
  clients: KubeClients;
  rootLog: Logger;
  /** Where its stops go; they run in reverse order when the agent stops. */
  stops: Array<() => Promise<void> | void>;
  /** Read at stop: remove every VM's network too (vkvm up stops its VMs). */
  removeAllOnStop: () => boolean;
}

export function startPodNetwork({ config, clients, rootLog, stops, removeAllOnStop }: NodePodNetworkOptions): PodNetwork {
  const log = rootLog.child({ component: 'agent', node: config.nodeName });
  // Other nodes' pod ranges and addresses, for the routes between nodes' pods.
  const nodes = new ClusterInformer<V1Node>({
    clients,
    path: '/api/v1/nodes',
    list: () => clients.core.listNode(),
    log: rootLog.child({ component: 'node-informer' }),
  });
  // Not awaited: pods and their local network need no peers; routes follow once the list is in.
  void nodes.start();
  stops.push(() => nodes.stop());
  const peers = () => peersOf(nodes.list(), config.nodeName);
  // Where the VMs of this node's lent addresses run: what it lends to whom.
  const lentVmis = new LentVmis(clients, rootLog.child({ component: 'lent-vmis' }));
  stops.push(() => lentVmis.stop());
  const network = new PodNetwork({
    bridge: config.bridge,
    dir: join(config.stateDir, 'network'),
    podCidr: async () => {
      if (config.podCidr) return config.podCidr;
      return ipv4PodCidrOf((await clients.core.readNode({ name: config.nodeName })).spec);
    },
    nodeName: config.nodeName,
    peers,
    // Migrated VMs' addresses this node hosts and those of its range it lends, for the nodes' routes (docs/networking.md).
    publishMoved: (claims) => publishMovedPodIps(clients, config.nodeName, claims),
    lending: lentVmis,
    log: rootLog.child({ component: 'network' }),
  });
  lentVmis.onChange(() =>
    network.ensureNode().catch((err: unknown) => log.warn({ err }, 'could not update the lent addresses; the next repair retries')),
  );
  // A peer joined, left or moved: route it now rather than at the next repair (every 30 s).
  let knownPeers = JSON.stringify(peers());
  nodes.onChange(() => {
    const now = JSON.stringify(peers());
    if (now === knownPeers) return;
    knownPeers = now;
    network.ensureNode().catch((err: unknown) => log.warn({ err }, 'could not update the routes to other nodes; the next repair retries'));
  });
  // Runs after the pod controller stopped (stops run in reverse): with the VMs gone (vkvm up), so goes their network.
  stops.push(() => network.close({ removeAll: removeAllOnStop() }));
  return network;
}

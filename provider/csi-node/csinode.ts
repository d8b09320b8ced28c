// The node's CSINode object, as the kubelet's nodeinfomanager keeps it: one
// entry per registered driver, from its NodeGetInfo (node ID, the topology
// keys it reports, and its volume limit as allocatable.count), owned by the
// Node so it goes with it. The agent is its only writer, and writes it whole:
// its drivers are exactly the registered ones. Pure.
import type { V1CSINode, V1CSINodeDriver } from '@kubernetes/client-node';
import type { NodeInfo } from './driver-client.js';

/** A driver's CSINode entry from its NodeGetInfo. */
export function csiNodeDriver(name: string, info: NodeInfo): V1CSINodeDriver {
  const keys = Object.keys(info.accessibleTopology?.segments ?? {}).sort();
  return {
    name,
    nodeID: info.nodeId,
    // The kubelet leaves the keys out (null) when the driver reports no topology.
    ...(keys.length ? { topologyKeys: keys } : {}),
    ...(info.maxVolumesPerNode > 0 ? { allocatable: { count: info.maxVolumesPerNode } } : {}),
  };
}

/** The CSINode the node should have: its registered drivers, by name, owned by its Node. */
export function desiredCsiNode(node: { name: string; uid: string }, drivers: readonly V1CSINodeDriver[]): V1CSINode {
  return {
    apiVersion: 'storage.k8s.io/v1',
    kind: 'CSINode',
    metadata: {
      name: node.name,
      ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.uid }],
    },
    spec: { drivers: [...drivers].sort((a, b) => a.name.localeCompare(b.name)) },
  };
}

const comparable = (d: V1CSINodeDriver): string => JSON.stringify([d.name, d.nodeID, d.topologyKeys ?? [], d.allocatable?.count ?? null]);

/** Whether the CSINode found (undefined: none) differs from the desired one in its drivers or owner. */
export function csiNodeDiffers(found: V1CSINode | undefined, desired: V1CSINode): boolean {
  if (!found) return true;
  const owner = (c: V1CSINode) => c.metadata?.ownerReferences?.find((r) => r.kind === 'Node')?.uid;
  const drivers = (c: V1CSINode) => [...(c.spec?.drivers ?? [])].map(comparable).sort().join('\n');
  return owner(found) !== owner(desired) || drivers(found) !== drivers(desired);
}

// Tells the other nodes which migrated VMs' addresses this node hosts and
// which of its own range it lends (provider/network/hosted-annotation.ts):
// its own Node's vkvm.io/hosted-pod-ips and vkvm.io/lent-pod-ips annotations,
// which every vkvm node's routes follow when both agree. A node may patch its
// own Node object (the NodeRestriction admission plugin limits only its
// labels, taints and other Nodes); a merge patch touches only these
// annotations, so flannel's and others' stay.
import type { KubeClients } from '../kube/client.js';
import { mergePatch } from '../kube/client.js';
import { HOSTED_POD_IPS_ANNOTATION, LENT_POD_IPS_ANNOTATION, renderHostedPodIps, renderLentPodIps } from '../network/hosted-annotation.js';
import type { MovedClaims } from '../network/moved-address.js';

/** The merge patch that sets (or, for none, removes) both annotations. Pure. */
export function movedPodIpsPatch(claims: MovedClaims): { metadata: { annotations: Record<string, string | null> } } {
  return {
    metadata: {
      annotations: {
        [HOSTED_POD_IPS_ANNOTATION]: renderHostedPodIps(claims.hosted),
        [LENT_POD_IPS_ANNOTATION]: renderLentPodIps(claims.lent),
      },
    },
  };
}

export async function publishMovedPodIps(clients: KubeClients, nodeName: string, claims: MovedClaims): Promise<void> {
  await clients.core.patchNode({ name: nodeName, body: movedPodIpsPatch(claims) }, mergePatch);
}

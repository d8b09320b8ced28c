// Tells the other nodes which migrated VMs' addresses this node hosts: its
// own Node's vkvm.io/hosted-pod-ips annotation (provider/network/
// hosted-annotation.ts), which every vkvm node's peer routes follow. A node may
// patch its own Node object (the NodeRestriction admission plugin limits
// only its labels, taints and other Nodes); a merge patch touches only this
// annotation, so flannel's and others' stay.
import type { KubeClients } from '../kube/client.js';
import { mergePatch } from '../kube/client.js';
import { HOSTED_POD_IPS_ANNOTATION, renderHostedPodIps, type HostedPodIps } from '../network/hosted-annotation.js';

/** The merge patch that sets (or, for none, removes) the annotation. Pure. */
export function hostedPodIpsPatch(hosted: HostedPodIps): { metadata: { annotations: Record<string, string | null> } } {
  return { metadata: { annotations: { [HOSTED_POD_IPS_ANNOTATION]: renderHostedPodIps(hosted) } } };
}

export async function publishHostedPodIps(clients: KubeClients, nodeName: string, hosted: HostedPodIps): Promise<void> {
  await clients.core.patchNode({ name: nodeName, body: hostedPodIpsPatch(hosted) }, mergePatch);
}

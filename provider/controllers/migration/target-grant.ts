// A live migration's target node reads the VMI as its own node does
// (node-vmi-grant.ts): a second Role and RoleBinding, on that VMI alone,
// named after the VMI and the node, owned by the VMI so they go with it.
import type { KubeClients } from '../../kube/client.js';
import { isAlreadyExists } from '../../kube/errors.js';
import type { VirtualMachineInstance } from '../../kubevirt/types.js';
import { nodeVmiGrant } from '../node-vmi-grant.js';

export const targetGrantName = (vmi: VirtualMachineInstance, node: string): string => `vkvm-node-vmi-${vmi.metadata.uid}-${node}`;

/** Idempotent: an existing grant is left as it is. */
export async function ensureTargetGrant(clients: KubeClients, vmi: VirtualMachineInstance, node: string): Promise<void> {
  const { role, binding } = nodeVmiGrant(vmi, node, targetGrantName(vmi, node));
  for (const obj of [role, binding]) {
    try {
      await clients.objects.create(obj);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
  }
}

// A node reads the VMIs scheduled to it and no others. RBAC cannot say "the
// VMIs whose status.nodeName is mine": it sees no object fields, and in
// Kubernetes 1.33 only the Node authorizer (for pods and nodes) and webhook
// authorizers see a request's field selector. So the VMI controller grants
// each VMI to the node it was scheduled to, by name: a Role with get, list
// and watch on resourceNames [the VMI], bound to the user system:node:<node>,
// both owned by the VMI, so the garbage collector removes them with it. A
// list or watch with fieldSelector metadata.name=<VMI> is authorized by
// resourceNames as a get is, so the node can watch that one VMI.
//
// Named after the VMI's uid: a VMI recreated under the same name is another
// grant, and the old one goes with the old VMI.
import type { V1Role, V1RoleBinding } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { isAlreadyExists } from '../kube/errors.js';
import { KUBEVIRT_API_VERSION, type VirtualMachineInstance } from '../kubevirt/types.js';

const RBAC_API = 'rbac.authorization.k8s.io';

export const nodeUser = (nodeName: string): string => `system:node:${nodeName}`;

/**
 * The Role and RoleBinding that let `nodeName` read exactly this VMI; `name`
 * for a second grant (a live migration's target node).
 */
export function nodeVmiGrant(
  vmi: VirtualMachineInstance,
  nodeName: string,
  name = `vkvm-node-vmi-${vmi.metadata.uid}`,
): { role: V1Role; binding: V1RoleBinding } {
  const metadata = {
    name,
    namespace: vmi.metadata.namespace ?? 'default',
    labels: { 'app.kubernetes.io/part-of': 'vkvm', 'kubevirt.io/created-by': vmi.metadata.uid! },
    ownerReferences: [
      { apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstance', name: vmi.metadata.name!, uid: vmi.metadata.uid! },
    ],
  };
  return {
    role: {
      apiVersion: `${RBAC_API}/v1`,
      kind: 'Role',
      metadata,
      rules: [
        {
          apiGroups: ['kubevirt.io'],
          resources: ['virtualmachineinstances'],
          resourceNames: [vmi.metadata.name!],
          verbs: ['get', 'list', 'watch'],
        },
      ],
    },
    binding: {
      apiVersion: `${RBAC_API}/v1`,
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: RBAC_API, kind: 'Role', name },
      subjects: [{ apiGroup: RBAC_API, kind: 'User', name: nodeUser(nodeName) }],
    },
  };
}

/** Creates each VMI's grant once per controller term (an existing one is left as it is). */
export class NodeVmiGrants {
  /** The VMI uid granted, by VMI key. */
  private readonly granted = new Map<string, string>();

  constructor(private readonly clients: KubeClients) {}

  async ensure(key: string, vmi: VirtualMachineInstance, nodeName: string): Promise<void> {
    const uid = vmi.metadata.uid!;
    if (this.granted.get(key) === uid) return;
    const { role, binding } = nodeVmiGrant(vmi, nodeName);
    for (const obj of [role, binding]) {
      try {
        await this.clients.objects.create(obj);
      } catch (err) {
        if (!isAlreadyExists(err)) throw err;
      }
    }
    this.granted.set(key, uid);
  }

  /** The VMI is gone, and its grant with it (garbage-collected). */
  forget(key: string): void {
    this.granted.delete(key);
  }
}

// The pod controller's writes to the API server, behind one interface so its
// unit tests run against a fake: pod status and the VMI status this node
// owns (only status-writer.ts calls those), and the final pod deletion. Each
// carries the object's UID as a precondition, so a newer object that took
// the name meanwhile is never touched.
import type { KubeClients } from '../kube/client.js';
import { mergePatch, strategicMerge } from '../kube/client.js';
import { GROUP, VERSION, VMI_PLURAL } from '../kubevirt/types.js';

export interface PodApi {
  /** A strategic merge patch of the pod's status subresource; its body names the UID (podStatusPatch). */
  patchPodStatus(namespace: string, name: string, body: object): Promise<void>;
  /** A merge patch of the VMI's status subresource; its body names the UID. */
  patchVmiStatus(namespace: string, name: string, body: object): Promise<void>;
  /** Removes the pod object at once (grace period 0), if it still has this UID. */
  deletePod(namespace: string, name: string, uid: string): Promise<void>;
}

export function kubePodApi(clients: KubeClients): PodApi {
  return {
    async patchPodStatus(namespace, name, body) {
      await clients.core.patchNamespacedPodStatus({ name, namespace, body }, strategicMerge);
    },
    async patchVmiStatus(namespace, name, body) {
      await clients.custom.patchNamespacedCustomObjectStatus(
        { group: GROUP, version: VERSION, namespace, plural: VMI_PLURAL, name, body },
        mergePatch,
      );
    },
    async deletePod(namespace, name, uid) {
      await clients.core.deleteNamespacedPod({ name, namespace, body: { gracePeriodSeconds: 0, preconditions: { uid } } });
    },
  };
}

// The pods bound to this node: the shared list-then-watch cache with the
// field selector spec.nodeName=<node>; the pod controller's handlers on it
// only enqueue keys.
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { ClusterInformer } from '../kube/informer.js';
import type { Logger } from '../log.js';

export function createPodInformer(clients: KubeClients, nodeName: string, log: Logger): ClusterInformer<V1Pod> {
  const fieldSelector = `spec.nodeName=${nodeName}`;
  return new ClusterInformer<V1Pod>({
    clients,
    path: '/api/v1/pods',
    list: () => clients.core.listPodForAllNamespaces({ fieldSelector }),
    fieldSelector,
    log,
  });
}

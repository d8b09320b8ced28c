// `vkvm reset`'s last word with the API server: the node deletes its own Node
// object (the Node authorizer allows that). Bounded in time, since a reset is
// often run because the control plane is gone, and a request to an address
// that takes connections but never answers would otherwise wait forever; the
// rest of the take-down is local and goes on regardless.
import type { KubeClients } from '../kube/client.js';
import { apiMessage, isNotFound } from '../kube/errors.js';

/** How long a reset waits on the API server to delete the Node: a live one answers in well under a second. */
export const NODE_DELETE_TIMEOUT_MS = 15_000;

export type NodeDeletion = { deleted: true } | { deleted: false; warning: string };

export async function deleteOwnNode(clients: KubeClients, nodeName: string, timeoutMs = NODE_DELETE_TIMEOUT_MS): Promise<NodeDeletion> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
  const deletion = clients.core.deleteNode({ name: nodeName }).then(
    () => 'deleted' as const,
    (err: unknown) => (isNotFound(err) ? ('deleted' as const) : err),
  );
  try {
    const outcome = await Promise.race([deletion, timedOut]);
    if (outcome === 'deleted') return { deleted: true };
    const why = outcome === 'timeout' ? `the API server did not answer within ${timeoutMs / 1000} s` : apiMessage(outcome);
    return {
      deleted: false,
      warning: `could not delete Node ${nodeName} (${why}); the local take-down went on: once the control plane answers, delete it with: kubectl delete node ${nodeName}`,
    };
  } finally {
    clearTimeout(timer);
    // The abandoned request's connection goes too, so it keeps neither a socket nor the process alive.
    clients.closeConnections();
  }
}

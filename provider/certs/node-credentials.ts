// A node's own identity for an agent that vkvm runs beside the control plane
// (node 1 of `vkvm up`): system:node:<name> in group system:nodes, as a joined
// node gets through the bootstrap token, but issued through the admin's CSR
// approval. So node 1 is held to the Node authorizer and NodeRestriction as
// every other node is, and the admin's credentials stay with the operator.
import { join } from 'node:path';
import type { KubeClients } from '../kube/client.js';
import { clientSubject, KUBELET_CLIENT_SIGNER } from './client.js';
import { ensureClientCredentials } from './client-credentials.js';

/** Where node credentials live in an agent's state dir: a private directory beside its `pki/`. */
export function nodeCredentialsPaths(stateDir: string): { dir: string; kubeconfig: string; pem: string } {
  const dir = join(stateDir, 'node-credentials');
  return { dir, kubeconfig: join(dir, 'kubeconfig'), pem: join(dir, 'client.pem') };
}

/** Makes sure the agent of `nodeName` has a valid node certificate; returns its kubeconfig's path. */
export async function ensureNodeCredentials(
  admin: KubeClients,
  o: { nodeName: string; stateDir: string; server: string; caPem: string },
): Promise<string> {
  const paths = nodeCredentialsPaths(o.stateDir);
  await ensureClientCredentials(admin, {
    subject: clientSubject(o.nodeName),
    signerName: KUBELET_CLIENT_SIGNER,
    csrPrefix: `node-csr-${o.nodeName}`,
    reason: 'VkvmUpNode',
    message: 'approved by vkvm up for the node it runs on this host',
    server: o.server,
    caPem: o.caPem,
    ...paths,
  });
  return paths.kubeconfig;
}

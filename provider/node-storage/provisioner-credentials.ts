// A node's CSI sidecars' own identity, not the admin's (certs/client-credentials.ts):
// its provisioner and snapshotter are user vkvm:csi-provisioner:<node> in
// group vkvm:csi-provisioners, which deploy/csi.yaml binds.
import { ensureClientCredentials } from '../certs/client-credentials.js';
import type { KubeClients } from '../kube/client.js';
import { provisionerSubject, type NodeStoragePaths } from './node-storage-spec.js';

/** Makes sure `paths.kubeconfig` names a valid certificate of the provisioner of `nodeName`. */
export async function ensureProvisionerCredentials(
  admin: KubeClients,
  o: { nodeName: string; server: string; caPem: string; paths: NodeStoragePaths },
): Promise<void> {
  await ensureClientCredentials(admin, {
    subject: provisionerSubject(o.nodeName),
    csrPrefix: `vkvm-csi-provisioner-${o.nodeName}`,
    reason: 'VkvmCsiProvisioner',
    message: "approved by vkvm for a node's CSI provisioner",
    server: o.server,
    caPem: o.caPem,
    dir: o.paths.dir,
    kubeconfig: o.paths.kubeconfig,
    pem: o.paths.pem,
  });
}

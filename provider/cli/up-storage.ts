// What `vkvm up` does for CSI volumes, with its local control plane: applies
// deploy/csi.yaml (the CSIDriver csi.vkvm.io, the default StorageClass
// vkvm-local, the provisioner's RBAC) and gives every vkvm node its driver
// and provisioner (provider/node-storage/), each provisioner with an identity
// of its own that vkvm up, as admin, issues. Node 1's run in this process;
// nodes 2..N get theirs from their init (the spec below).
import { join } from 'node:path';
import { applyManifests, readManifests } from '../kube/apply.js';
import { clusterCaData, type KubeClients } from '../kube/client.js';
import { packageRoot } from '../package-root.js';
import { nodeStoragePaths, type NodeStorageOf, type NodeStorageSpec } from '../node-storage/node-storage-spec.js';
import { ensureProvisionerCredentials } from '../node-storage/provisioner-credentials.js';

/** Applies deploy/csi.yaml; the provisioners reach the API server where the admin kubeconfig does. */
export async function prepareStorage(admin: KubeClients, o: { provisionerBinary: string; logLevel: string }): Promise<NodeStorageOf> {
  await applyManifests(admin, await readManifests(join(packageRoot(), 'deploy', 'csi.yaml')));
  const server = admin.kc.getCurrentCluster()!.server;
  const caPem = Buffer.from(await clusterCaData(admin.kc), 'base64').toString('utf8');
  return async (node) => {
    const spec: NodeStorageSpec = { nodeName: node.name, stateDir: node.stateDir, runDir: node.runDir, ...o };
    await ensureProvisionerCredentials(admin, { nodeName: node.name, server, caPem, paths: nodeStoragePaths(spec) });
    return spec;
  };
}

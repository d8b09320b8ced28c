// What `vkvm up` does for CSI volumes, with its local control plane: applies
// the snapshot CRDs (deploy/snapshot-crds/, external-snapshotter's, unchanged)
// and deploy/csi.yaml (the CSIDriver csi.vkvm.io, the default StorageClass
// vkvm-local and VolumeSnapshotClass vkvm-local, the sidecars' and the
// snapshot controller's RBAC) and gives every vkvm node its driver,
// provisioner and snapshotter (provider/node-storage/), each node's sidecars
// with an identity of their own that vkvm up, as admin, issues. Node 1's run
// in this process; nodes 2..N get theirs from their init (the spec below).
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { applyManifests, readManifests } from '../kube/apply.js';
import { clusterCaPem, type KubeClients } from '../kube/client.js';
import { waitForCrdsEstablished } from '../kube/crds-established.js';
import { packageRoot } from '../package-root.js';
import { nodeStoragePaths, type NodeStorageOf, type NodeStorageSpec } from '../node-storage/node-storage-spec.js';
import { ensureProvisionerCredentials } from '../node-storage/provisioner-credentials.js';

/** external-snapshotter/client/v8 v8.2.0's config/crd (the client module v8.3.0 builds against), unchanged. */
export const SNAPSHOT_CRDS_DIR = join(packageRoot(), 'deploy', 'snapshot-crds', 'client-v8.2.0');

/** The snapshot CRDs, served before csi.yaml's VolumeSnapshotClass is applied. */
async function applySnapshotCrds(admin: KubeClients): Promise<void> {
  const crds = [];
  for (const f of (await readdir(SNAPSHOT_CRDS_DIR)).filter((f) => f.endsWith('.yaml')).sort())
    crds.push(...(await readManifests(join(SNAPSHOT_CRDS_DIR, f))));
  await applyManifests(admin, crds);
  await waitForCrdsEstablished(
    admin,
    crds.map((c) => c.metadata!.name!),
  );
}

/** Applies deploy/csi.yaml; the sidecars reach the API server where the admin kubeconfig does. */
export async function prepareStorage(
  admin: KubeClients,
  o: { provisionerBinary: string; snapshotterBinary: string; logLevel: string },
): Promise<NodeStorageOf> {
  await applySnapshotCrds(admin);
  await applyManifests(admin, await readManifests(join(packageRoot(), 'deploy', 'csi.yaml')));
  const server = admin.kc.getCurrentCluster()!.server;
  const caPem = await clusterCaPem(admin.kc);
  return async (node) => {
    const spec: NodeStorageSpec = { nodeName: node.name, stateDir: node.stateDir, runDir: node.runDir, ...o };
    await ensureProvisionerCredentials(admin, { nodeName: node.name, server, caPem, paths: nodeStoragePaths(spec) });
    return spec;
  };
}

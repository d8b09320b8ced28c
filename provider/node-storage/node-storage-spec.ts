// What one node runs for CSI volumes (pure): `vkvm csi`, external-provisioner
// and csi-snapshotter as host processes, where their files live, and their command lines. The
// volumes live under the node's state dir and outlive its processes (the
// cluster's PVs name them); the socket lives under its run dir.
import { join } from 'node:path';
import { pluginRegistryDirOf, registrationSocketIn } from '../csi-node/registry-dir.js';

/** Where the provisioner keeps its CSIStorageCapacity objects (deploy/csi.yaml's Role). */
export const CAPACITY_NAMESPACE = 'kube-system';

/** What a node's storage needs; plain JSON, so a simulated host's init gets it in its spec. */
export interface NodeStorageSpec {
  nodeName: string;
  /** The node's state and run dirs (the agent's --state-dir and --run-dir). */
  stateDir: string;
  runDir: string;
  /** external-provisioner and external-snapshotter's csi-snapshotter, built with the control plane (deploy/cluster). */
  provisionerBinary: string;
  snapshotterBinary: string;
  logLevel: string;
}

/** How a node's spec is had: its provisioner's credentials are made first, by whoever may (vkvm up). */
export type NodeStorageOf = (node: { name: string; stateDir: string; runDir: string }) => Promise<NodeStorageSpec>;

export interface NodeStoragePaths {
  /** `vkvm csi --csi-dir`: volumes, snapshots, records. Kept across runs. */
  csiDir: string;
  /** The driver's CSI socket. */
  socket: string;
  /** The processes' logs and the sidecars' credentials (0700). */
  dir: string;
  /** The sidecars' kubeconfig and the PEM (certificate and key) it names: the provisioner's, which the snapshotter shares. */
  kubeconfig: string;
  pem: string;
}

export function nodeStoragePaths(spec: Pick<NodeStorageSpec, 'stateDir' | 'runDir'>): NodeStoragePaths {
  const dir = join(spec.stateDir, 'csi-sidecars');
  return {
    csiDir: join(spec.stateDir, 'csi'),
    socket: join(spec.runDir, 'csi', 'csi.sock'),
    dir,
    kubeconfig: join(dir, 'provisioner.kubeconfig'),
    pem: join(dir, 'provisioner.pem'),
  };
}

/** `vkvm csi`'s arguments (after the CLI path). */
export function driverArgs(spec: NodeStorageSpec, paths: NodeStoragePaths): string[] {
  return [
    'csi',
    `--csi-dir=${paths.csiDir}`,
    `--socket=${paths.socket}`,
    `--node-id=${spec.nodeName}`,
    `--log-level=${spec.logLevel}`,
    // The node grows its volumes' files, so one cluster-wide resizer serves every node (docs/design/csi.md §6).
    '--expansion=node',
    // Where this node's agent watches for drivers (the kubelet's plugins_registry, per node under vkvm up).
    `--registration-socket=${registrationSocketIn(pluginRegistryDirOf(spec.stateDir), 'csi.vkvm.io')}`,
  ];
}

/** klog's verbosity for vkvm's log level. */
export const verbosity = (logLevel: string) => `--v=${logLevel === 'debug' || logLevel === 'trace' ? 5 : 2}`;

/**
 * external-provisioner beside the node's driver (docs/design/csi.md §6): it
 * provisions only the claims the scheduler gave this node
 * (--node-deployment, NODE_NAME) and publishes this node's capacity for the
 * default class, owned by nothing (no pod owns a host process).
 */
export function provisionerCommand(spec: NodeStorageSpec, paths: NodeStoragePaths): { argv: string[]; env: Record<string, string> } {
  return {
    argv: [
      spec.provisionerBinary,
      `--csi-address=${paths.socket}`,
      `--kubeconfig=${paths.kubeconfig}`,
      '--node-deployment',
      '--feature-gates=Topology=true',
      '--enable-capacity',
      '--capacity-ownerref-level=-1',
      // A claim of an Immediate class would land on whichever node's provisioner took it first: only
      // WaitForFirstConsumer claims are provisioned, on the node picked for their first consumer.
      '--node-deployment-immediate-binding=false',
      verbosity(spec.logLevel),
    ],
    env: { NODE_NAME: spec.nodeName, NAMESPACE: CAPACITY_NAMESPACE },
  };
}

/**
 * csi-snapshotter beside the node's driver (docs/design/csi.md §4, §6): it
 * takes only the VolumeSnapshotContents the snapshot controller labelled
 * with this node (--node-deployment, NODE_NAME; the controller runs with
 * --enable-distributed-snapshotting), because a volume's snapshot can only
 * be made by the driver on the volume's node. It shares the provisioner's
 * identity: the same node's sidecars, one trust (both drive the node's
 * root-run driver), and deploy/csi.yaml grants that group the snapshotter's
 * rules too.
 */
export function snapshotterCommand(spec: NodeStorageSpec, paths: NodeStoragePaths): { argv: string[]; env: Record<string, string> } {
  return {
    argv: [
      spec.snapshotterBinary,
      `--csi-address=${paths.socket}`,
      `--kubeconfig=${paths.kubeconfig}`,
      '--node-deployment',
      verbosity(spec.logLevel),
    ],
    env: { NODE_NAME: spec.nodeName },
  };
}

/** The provisioner's identity: one user per node, one group RBAC binds (deploy/csi.yaml). */
export const provisionerSubject = (nodeName: string) => ({
  commonName: `vkvm:csi-provisioner:${nodeName}`,
  organizations: ['vkvm:csi-provisioners'],
  dnsNames: [],
  ipAddresses: [],
});

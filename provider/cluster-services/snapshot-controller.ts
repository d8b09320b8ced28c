// `vkvm up`'s snapshot controller: external-snapshotter v8.3.0's
// snapshot-controller (built with the control plane, deploy/cluster), one per
// cluster as the controller manager is. It binds VolumeSnapshots to
// VolumeSnapshotContents and, with --enable-distributed-snapshotting, labels
// each content with the node of its volume, so that node's csi-snapshotter
// (provider/node-storage/) takes it: a volume's snapshot can only be made on
// its node (docs/design/csi.md §4). Its identity is user
// vkvm:snapshot-controller (a client certificate vkvm up approves), bound to
// upstream's rules in deploy/csi.yaml. It dies with vkvm up; stop() ends it.
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { verbosity } from '../node-storage/node-storage-spec.js';
import type { SupervisedCommand } from '../supervised-process.js';
import { startOwnIdentityProcess, type RunningOwnIdentityProcess } from './own-identity-process.js';

export const SNAPSHOT_CONTROLLER_USER = 'vkvm:snapshot-controller';

export interface SnapshotControllerStart {
  binary: string;
  /** Admin clients: they approve its CSR. */
  clients: KubeClients;
  /** Its credentials and log: <state-dir>/snapshot-controller (0700), kept across runs like the sidecars'. */
  dir: string;
  logLevel: string;
  log: Logger;
}

export type RunningSnapshotController = RunningOwnIdentityProcess;

export function snapshotControllerCommand(o: { binary: string; kubeconfig: string; logLevel: string }): SupervisedCommand {
  return {
    argv: [o.binary, `--kubeconfig=${o.kubeconfig}`, '--enable-distributed-snapshotting', verbosity(o.logLevel)],
  };
}

export function startSnapshotController(o: SnapshotControllerStart): Promise<RunningSnapshotController> {
  return startOwnIdentityProcess({
    name: 'snapshot controller',
    slug: 'snapshot-controller',
    user: SNAPSHOT_CONTROLLER_USER,
    clients: o.clients,
    dir: o.dir,
    command: (kubeconfig) => snapshotControllerCommand({ binary: o.binary, kubeconfig, logLevel: o.logLevel }),
    log: o.log,
  });
}

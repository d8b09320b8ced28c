// `vkvm up`'s snapshot controller: external-snapshotter v8.3.0's
// snapshot-controller (built with the control plane, deploy/cluster), one per
// cluster as the controller manager is. It binds VolumeSnapshots to
// VolumeSnapshotContents and, with --enable-distributed-snapshotting, labels
// each content with the node of its volume, so that node's csi-snapshotter
// (provider/node-storage/) takes it: a volume's snapshot can only be made on
// its node (docs/design/csi.md §4). Its identity is user
// vkvm:snapshot-controller (a client certificate vkvm up approves), bound to
// upstream's rules in deploy/csi.yaml. It dies with vkvm up; stop() ends it.
import { join } from 'node:path';
import { ensureClientCredentials } from '../certs/client-credentials.js';
import { clusterCaData, type KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { verbosity } from '../node-storage/node-storage-spec.js';
import { SupervisedProcess, type SupervisedCommand } from '../supervised-process.js';

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

export interface RunningSnapshotController {
  stop(): Promise<void>;
}

export function snapshotControllerCommand(o: { binary: string; kubeconfig: string; logLevel: string }): SupervisedCommand {
  return {
    argv: [o.binary, `--kubeconfig=${o.kubeconfig}`, '--enable-distributed-snapshotting', verbosity(o.logLevel)],
  };
}

export async function startSnapshotController(o: SnapshotControllerStart): Promise<RunningSnapshotController> {
  const kubeconfig = join(o.dir, 'kubeconfig');
  await ensureClientCredentials(o.clients, {
    subject: { commonName: SNAPSHOT_CONTROLLER_USER, organizations: [], dnsNames: [], ipAddresses: [] },
    csrPrefix: 'vkvm-snapshot-controller',
    reason: 'VkvmUpApproved',
    message: "approved by vkvm up for its snapshot controller's client certificate",
    server: o.clients.kc.getCurrentCluster()!.server,
    caPem: Buffer.from(await clusterCaData(o.clients.kc), 'base64').toString('utf8'),
    dir: o.dir,
    kubeconfig,
    pem: join(o.dir, 'client.pem'),
  });
  const controller = new SupervisedProcess({
    name: 'snapshot controller',
    command: async () => snapshotControllerCommand({ binary: o.binary, kubeconfig, logLevel: o.logLevel }),
    logFile: join(o.dir, 'snapshot-controller.log'),
    log: o.log,
  });
  controller.start();
  o.log.info({ dir: o.dir }, 'snapshot controller runs');
  return { stop: () => controller.stop() };
}

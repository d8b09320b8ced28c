// `vkvm up`'s volume resizer: external-resizer v1.14.0's csi-resizer (built
// with the control plane, deploy/cluster), one per cluster. The nodes'
// drivers run with --expansion=node: they offer expansion on the Node service
// only, so the resizer takes its trivial path (docs/design/csi.md §3, §6): it
// raises the PV's capacity and marks the claim FileSystemResizePending, never
// calling the driver per volume. One resizer, asking node 1's driver its
// capabilities, so serves every node's volumes; each node's agent then grows
// the volume where it lives (provider/csi-node/volume-expansion.ts). Its
// identity is user vkvm:csi-resizer, bound to upstream's rules in
// deploy/csi.yaml less pods (no volume-in-use handling) and leases (no leader
// election).
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { verbosity } from '../node-storage/node-storage-spec.js';
import type { SupervisedCommand } from '../supervised-process.js';
import { startOwnIdentityProcess, type RunningOwnIdentityProcess } from './own-identity-process.js';

export const RESIZER_USER = 'vkvm:csi-resizer';

export interface ResizerStart {
  binary: string;
  /** A node's driver socket: the resizer asks it the driver's name and capabilities. */
  csiSocket: string;
  /** Admin clients: they approve its CSR. */
  clients: KubeClients;
  /** Its credentials and log: <state-dir>/csi-resizer (0700). */
  dir: string;
  logLevel: string;
  log: Logger;
}

export function resizerCommand(o: { binary: string; csiSocket: string; kubeconfig: string; logLevel: string }): SupervisedCommand {
  return {
    argv: [
      o.binary,
      `--csi-address=${o.csiSocket}`,
      `--kubeconfig=${o.kubeconfig}`,
      // The in-use check watches every pod to retry offline-only drivers; this one expands online.
      '--handle-volume-inuse-error=false',
      verbosity(o.logLevel),
    ],
  };
}

export function startResizer(o: ResizerStart): Promise<RunningOwnIdentityProcess> {
  return startOwnIdentityProcess({
    name: 'volume resizer',
    slug: 'csi-resizer',
    user: RESIZER_USER,
    clients: o.clients,
    dir: o.dir,
    command: (kubeconfig) => resizerCommand({ binary: o.binary, csiSocket: o.csiSocket, kubeconfig, logLevel: o.logLevel }),
    log: o.log,
  });
}

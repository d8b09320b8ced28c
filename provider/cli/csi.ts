// `vkvm csi`: the CSI driver for host-local VM volumes, a process of its own
// beside the node agent (the agent reaches it as it would any CSI driver).
import { statfsSync, mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { CSI_OPTIONS, resolveCsiConfig } from '../csi/flags.js';
import { startCsiDriver } from '../csi/start.js';
import { createRootLogger } from '../log.js';
import { VKVM_VERSION } from '../node/status.js';
import { onShutdownSignal, shutdownSignal } from './run-until-signal.js';

export const CSI_HELP = `Usage: vkvm csi --csi-dir DIR [flags]

Runs vkvm's CSI driver (csi.vkvm.io) for volumes on this host: Identity,
Controller and Node services on one unix socket (0600). Volumes are sparse
raw files under DIR, given to a consumer as a loop device (block mode) or as
an ext4 filesystem on one (filesystem mode); snapshots and clones are copies,
copy-on-write where DIR's filesystem allows (XFS, btrfs). Each volume lives
on this node (topology key topology.vkvm.io/node). Runs in the foreground
until SIGINT/SIGTERM; volumes and their state survive restarts.

  --csi-dir DIR              where volumes, snapshots and records live (required)
  --socket PATH              the CSI socket (default
                             /var/lib/kubelet/plugins/csi.vkvm.io/csi.sock)
  --node-id NAME             this node's name (default: the host name)
  --capacity SIZE            what volumes and snapshots may take in all, e.g.
                             500Gi (default: the size of DIR's filesystem)
  --default-volume-size SIZE a volume's size when its claim names none (1Gi)
  --driver-name NAME         the CSI driver name (default csi.vkvm.io)
  --registration-socket PATH also serve the kubelet's plugin registration (v1)
                             there (0600), as node-driver-registrar does: the
                             node agent's plugin registry dir, e.g.
                             /var/lib/kubelet/plugins_registry/csi.vkvm.io-reg.sock
  --expansion MODE           controller (default): ControllerExpandVolume grows
                             a volume's file; node: only the Node service
                             expands, growing the file where it lives, so one
                             external-resizer serves every node's volumes
  --log-level LEVEL          trace, debug, info (default), warn, error
  -h, --help                 show this help
`;

export async function csiCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: CSI_OPTIONS, strict: true });
  if (values.help) {
    process.stdout.write(CSI_HELP);
    return 0;
  }
  const shutdown = shutdownSignal();
  const { config, socket, registrationSocket } = resolveCsiConfig(
    values,
    {
      hostname: hostname().toLowerCase(),
      filesystemBytes: (dir) => {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        const s = statfsSync(dir);
        return s.blocks * s.bsize;
      },
    },
    VKVM_VERSION,
  );
  const log = createRootLogger(values['log-level']);
  const driver = await startCsiDriver(config, socket, log.child({ component: 'csi' }), registrationSocket);
  await onShutdownSignal(async () => {
    log.info('shutting down');
    await driver.stop();
  }, shutdown);
  return 0;
}

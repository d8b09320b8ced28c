// A node's CSI volumes as host processes (docs/design/csi.md §6): `vkvm csi`
// serving its socket, then external-provisioner and csi-snapshotter pointed
// at it with the node's sidecar credentials (provisioner-credentials.ts, made
// by whoever may approve them before this runs). All are restarted when they
// exit and die with their owner (vkvm up, or a simulated host's init); stop()
// ends them and removes the socket's directory. The volumes stay: the cluster's
// PVs name them.
import { connect } from 'node:net';
import { rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ensurePrivateDir } from '../certs/csr-api.js';
import type { Logger } from '../log.js';
import { cliPath } from '../package-root.js';
import { driverArgs, nodeStoragePaths, provisionerCommand, snapshotterCommand, type NodeStorageSpec } from './node-storage-spec.js';
import { SupervisedProcess } from '../supervised-process.js';

const DRIVER_READY_TIMEOUT_MS = 60_000;

export interface RunningNodeStorage {
  /** The driver's CSI socket. */
  socket: string;
  stop(): Promise<void>;
}

const accepts = (socket: string): Promise<boolean> =>
  new Promise((resolve) => {
    const c = connect(socket);
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });

/** Until the driver's socket accepts (it binds after its start-up repair): a failed start is an error here, not later. */
async function waitForDriver(socket: string, driver: SupervisedProcess, logFile: string): Promise<void> {
  const deadline = Date.now() + DRIVER_READY_TIMEOUT_MS;
  while (!(await accepts(socket))) {
    if (Date.now() > deadline)
      throw new Error(`vkvm csi did not serve ${socket} within ${DRIVER_READY_TIMEOUT_MS / 1000} s (pid ${driver.pid}); see ${logFile}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function startNodeStorage(spec: NodeStorageSpec, log: Logger): Promise<RunningNodeStorage> {
  const paths = nodeStoragePaths(spec);
  await ensurePrivateDir(paths.dir);
  const driverLog = join(paths.dir, 'driver.log');
  const driver = new SupervisedProcess({
    name: 'CSI driver',
    command: async () => ({ argv: [process.execPath, cliPath(), ...driverArgs(spec, paths)] }),
    logFile: driverLog,
    log,
  });
  const provisioner = new SupervisedProcess({
    name: 'CSI provisioner',
    command: async () => provisionerCommand(spec, paths),
    logFile: join(paths.dir, 'provisioner.log'),
    log,
  });
  const snapshotter = new SupervisedProcess({
    name: 'CSI snapshotter',
    command: async () => snapshotterCommand(spec, paths),
    logFile: join(paths.dir, 'snapshotter.log'),
    log,
  });
  const stop = async () => {
    await snapshotter.stop();
    await provisioner.stop();
    await driver.stop();
    await rm(dirname(paths.socket), { recursive: true, force: true });
  };
  try {
    driver.start();
    await waitForDriver(paths.socket, driver, driverLog);
    provisioner.start();
    snapshotter.start();
  } catch (err) {
    await stop();
    throw err;
  }
  log.info({ node: spec.nodeName, csiDir: paths.csiDir, socket: paths.socket }, 'CSI driver, provisioner and snapshotter run');
  return { socket: paths.socket, stop };
}

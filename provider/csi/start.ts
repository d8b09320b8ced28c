// Starts the driver: its records, the start-up repair, then the socket (an
// accepting socket means a driver ready to serve).
import type { Logger } from '../log.js';
import { makeDriver, type Driver, type DriverConfig } from './driver.js';
import { recover } from './recover.js';
import { startCsiServer } from './server.js';
import { Store } from './store.js';

export interface RunningCsiDriver {
  driver: Driver;
  socket: string;
  stop(): Promise<void>;
}

export async function startCsiDriver(config: DriverConfig, socket: string, log: Logger): Promise<RunningCsiDriver> {
  const store = await Store.open(config.dir);
  const driver = makeDriver(config, store, log);
  await recover(driver);
  const server = await startCsiServer(driver, socket);
  log.info(
    { socket, dir: config.dir, nodeId: config.nodeId, capacityBytes: config.capacityBytes, volumes: store.volumes.size },
    'CSI driver serving',
  );
  return { driver, socket, stop: () => server.stop() };
}

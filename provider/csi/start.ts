// Starts the driver: its records, the start-up repair, then the socket (an
// accepting socket means a driver ready to serve).
import type { Logger } from '../log.js';
import { makeDriver, type Driver, type DriverConfig } from './driver.js';
import { recover } from './recover.js';
import { startRegistrationServer } from './registration.js';
import { startCsiServer } from './server.js';
import { Store } from './store.js';

export interface RunningCsiDriver {
  driver: Driver;
  socket: string;
  stop(): Promise<void>;
}

/**
 * With `registrationSocket`, the driver also registers itself with the node
 * (registration.ts), after its CSI socket serves: a registered driver is one
 * the node can call.
 */
export async function startCsiDriver(
  config: DriverConfig,
  socket: string,
  log: Logger,
  registrationSocket?: string,
): Promise<RunningCsiDriver> {
  const store = await Store.open(config.dir);
  const driver = makeDriver(config, store, log);
  await recover(driver);
  const server = await startCsiServer(driver, socket);
  const registration = registrationSocket
    ? await startRegistrationServer({ socket: registrationSocket, name: config.name, endpoint: socket, log })
    : undefined;
  log.info(
    {
      socket,
      registrationSocket,
      dir: config.dir,
      nodeId: config.nodeId,
      capacityBytes: config.capacityBytes,
      volumes: store.volumes.size,
    },
    'CSI driver serving',
  );
  return {
    driver,
    socket,
    // The registration goes first: the node unregisters a driver whose registration socket is gone.
    stop: async () => {
      await registration?.stop();
      await server.stop();
    },
  };
}

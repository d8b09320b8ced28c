// What every CSI service of the driver shares: its configuration, records,
// per-object operation locks and logger, and the topology of this node.
import type { Logger } from '../log.js';
import type { ExpansionMode } from './expansion.js';
import { OperationLocks } from './operation-locks.js';
import type { Topology } from './records.js';
import type { Store } from './store.js';

export const DRIVER_NAME = 'csi.vkvm.io';
/** The topology segment that pins a volume to the node whose disk holds it. */
export const TOPOLOGY_KEY = 'topology.vkvm.io/node';

export interface DriverConfig {
  name: string;
  version: string;
  /** This node's name, the CSI node ID. */
  nodeId: string;
  /** Where volumes, snapshots and the records live (`--csi-dir`). */
  dir: string;
  /** What the driver may promise in all, volumes and snapshots at full size. */
  capacityBytes: number;
  /** The size of a volume whose request names none. */
  defaultVolumeBytes: number;
  /** Which service grows a volume's file (`--expansion`, expansion.ts). */
  expansion: ExpansionMode;
}

export interface Driver {
  config: DriverConfig;
  store: Store;
  locks: OperationLocks;
  log: Logger;
  topology: Topology;
  /** Bytes promised to creations under way, not yet in a record. */
  reservedBytes: { value: number };
}

export function makeDriver(config: DriverConfig, store: Store, log: Logger): Driver {
  return { config, store, locks: new OperationLocks(), log, topology: { [TOPOLOGY_KEY]: config.nodeId }, reservedBytes: { value: 0 } };
}

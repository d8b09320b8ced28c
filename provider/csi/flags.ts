// `vkvm csi`'s flags, parsed and checked once (pure: the filesystem's size
// and the host name come in as arguments).
import path from 'node:path';
import { ConfigError } from '../config.js';
import { parseQuantity } from '../kube/quantity.js';
import { DRIVER_NAME, type DriverConfig } from './driver.js';
import { EXPANSION_MODES, type ExpansionMode } from './expansion.js';
import { MIB } from './records.js';

const MAX_SOCKET_PATH_BYTES = 107;

export const CSI_OPTIONS = {
  'csi-dir': { type: 'string' },
  socket: { type: 'string', default: `/var/lib/kubelet/plugins/${DRIVER_NAME}/csi.sock` },
  'node-id': { type: 'string' },
  capacity: { type: 'string' },
  'default-volume-size': { type: 'string', default: '1Gi' },
  'driver-name': { type: 'string', default: DRIVER_NAME },
  'registration-socket': { type: 'string' },
  expansion: { type: 'string', default: 'controller' },
  'log-level': { type: 'string', default: 'info' },
  help: { type: 'boolean', short: 'h' },
} as const;

export interface CsiFlags {
  'csi-dir'?: string;
  socket?: string;
  'node-id'?: string;
  capacity?: string;
  'default-volume-size'?: string;
  'driver-name'?: string;
  'registration-socket'?: string;
  expansion?: string;
}

function bytes(field: string, raw: string): number {
  const n = parseQuantity(raw);
  if (n === null || n < MIB || !Number.isSafeInteger(Math.floor(n)))
    throw new ConfigError(field, `${JSON.stringify(raw)} is not a size of at least 1Mi`);
  return Math.floor(n);
}

function socketPath(field: string, socket: string): string {
  if (!path.isAbsolute(socket)) throw new ConfigError(field, `${JSON.stringify(socket)} must be an absolute path`);
  // The kernel's sockaddr_un holds 107 bytes of path; a longer one fails to bind with a misleading EADDRINUSE.
  if (Buffer.byteLength(socket) > MAX_SOCKET_PATH_BYTES)
    throw new ConfigError(field, `${JSON.stringify(socket)} is longer than a unix socket path may be (${MAX_SOCKET_PATH_BYTES} bytes)`);
  return socket;
}

/** The driver's configuration and its sockets; `filesystemBytes` is the size of the filesystem under --csi-dir. */
export function resolveCsiConfig(
  flags: CsiFlags,
  host: { hostname: string; filesystemBytes: (dir: string) => number },
  version: string,
): { config: DriverConfig; socket: string; registrationSocket?: string } {
  const dirFlag = flags['csi-dir'];
  if (!dirFlag) throw new ConfigError('--csi-dir', 'is required: the directory that holds the volumes');
  if (!path.isAbsolute(dirFlag)) throw new ConfigError('--csi-dir', `${JSON.stringify(dirFlag)} must be an absolute path`);
  const socket = socketPath('--socket', flags.socket ?? '');
  const registration = flags['registration-socket'];
  const registrationSocket = registration === undefined ? undefined : socketPath('--registration-socket', registration);
  const nodeId = flags['node-id'] ?? host.hostname;
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(nodeId))
    throw new ConfigError('--node-id', `${JSON.stringify(nodeId)} is not a Kubernetes node name`);
  const name = flags['driver-name'] ?? DRIVER_NAME;
  if (!/^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$/.test(name))
    throw new ConfigError('--driver-name', `${JSON.stringify(name)} is not a CSI driver name`);
  const expansion = flags.expansion ?? 'controller';
  if (!(EXPANSION_MODES as readonly string[]).includes(expansion))
    throw new ConfigError('--expansion', `${JSON.stringify(expansion)} is not one of ${EXPANSION_MODES.join(', ')}`);
  const dir = path.normalize(dirFlag);
  return {
    socket,
    ...(registrationSocket ? { registrationSocket } : {}),
    config: {
      name,
      version,
      nodeId,
      dir,
      capacityBytes: flags.capacity ? bytes('--capacity', flags.capacity) : host.filesystemBytes(dir),
      defaultVolumeBytes: bytes('--default-volume-size', flags['default-volume-size'] ?? '1Gi'),
      expansion: expansion as ExpansionMode,
    },
  };
}

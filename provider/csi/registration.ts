// The kubelet's plugin registration (pluginregistration v1), served by the
// driver itself because node-driver-registrar cannot be fetched here: a
// second socket, in the node's plugin registry directory, whose GetInfo tells
// the node agent (or a kubelet) the driver's name and where its CSI socket
// is. The watcher connects, asks, registers, and reports back through
// NotifyRegistrationStatus; a refusal is logged, and the driver serves on.
import { rm } from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../log.js';
import { loadRegistrationService } from './proto.js';
import { bindPrivateSocket } from './server.js';

/** The CSI versions the driver speaks, as node-driver-registrar announces them. */
export const SUPPORTED_CSI_VERSIONS = ['1.0.0'];

export interface PluginInfo {
  type: 'CSIPlugin';
  name: string;
  endpoint: string;
  supportedVersions: string[];
}

/** GetInfo's answer: a CSI plugin of this name whose CSI service is at `endpoint`. */
export function pluginInfo(name: string, endpoint: string): PluginInfo {
  return { type: 'CSIPlugin', name, endpoint, supportedVersions: SUPPORTED_CSI_VERSIONS };
}

export interface RegistrationServer {
  socket: string;
  stop(): Promise<void>;
}

/** Serves registration on `socket` (0600) for the driver `name` whose CSI socket is `endpoint`. */
export async function startRegistrationServer(o: {
  socket: string;
  name: string;
  endpoint: string;
  log: Logger;
}): Promise<RegistrationServer> {
  const server = new grpc.Server();
  const info = pluginInfo(o.name, o.endpoint);
  server.addService(loadRegistrationService().service, {
    GetInfo: (_call: unknown, callback: grpc.sendUnaryData<PluginInfo>) => callback(null, info),
    NotifyRegistrationStatus: (
      call: grpc.ServerUnaryCall<{ pluginRegistered?: boolean; error?: string }, object>,
      callback: grpc.sendUnaryData<object>,
    ) => {
      if (call.request.pluginRegistered) o.log.info({ socket: o.socket }, 'registered with the node');
      else o.log.error({ socket: o.socket, error: call.request.error }, 'the node refused the registration');
      callback(null, {});
    },
  });
  await bindPrivateSocket(server, o.socket);
  return {
    socket: o.socket,
    stop: async () => {
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      await rm(o.socket, { force: true });
    },
  };
}

// The driver's gRPC server: CSI's Identity, Controller and Node services on a
// unix socket that only root may open (0600; whoever can connect is trusted
// as the kubelet and the sidecars are). Handlers are plain functions of the
// driver and the request; errors become status codes here and nowhere else.
import { chmod, mkdir, rm } from 'node:fs/promises';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as controller from './controller.js';
import type { Driver } from './driver.js';
import { CsiError } from './errors.js';
import { controllerCapabilities } from './expansion.js';
import * as node from './node.js';
import { loadCsiServices } from './proto.js';
import * as snapshots from './snapshots.js';

type Handler = (d: Driver, req: never) => object | Promise<object>;

function identity(d: Driver): Record<string, Handler> {
  return {
    GetPluginInfo: () => ({ name: d.config.name, vendorVersion: d.config.version }),
    GetPluginCapabilities: () => ({
      capabilities: [
        { service: { type: 'CONTROLLER_SERVICE' } },
        { service: { type: 'VOLUME_ACCESSIBILITY_CONSTRAINTS' } },
        { volumeExpansion: { type: 'ONLINE' } },
      ],
    }),
    Probe: () => ({ ready: { value: true } }),
  };
}

const CONTROLLER: Record<string, Handler> = {
  ControllerGetCapabilities: (d) => ({
    capabilities: controllerCapabilities(controller.CONTROLLER_CAPABILITIES, d.config.expansion).map((type) => ({ rpc: { type } })),
  }),
  CreateVolume: controller.createVolume,
  DeleteVolume: controller.deleteVolume,
  ControllerPublishVolume: controller.controllerPublish,
  ControllerUnpublishVolume: controller.controllerUnpublish,
  ValidateVolumeCapabilities: controller.validateVolumeCapabilities,
  ListVolumes: controller.listVolumes,
  GetCapacity: controller.getCapacity,
  ControllerExpandVolume: controller.controllerExpand,
  CreateSnapshot: snapshots.createSnapshot,
  DeleteSnapshot: snapshots.deleteSnapshot,
  ListSnapshots: snapshots.listSnapshots,
};

const NODE: Record<string, Handler> = {
  NodeGetCapabilities: () => ({ capabilities: node.NODE_CAPABILITIES.map((type) => ({ rpc: { type } })) }),
  NodeGetInfo: node.nodeGetInfo,
  NodeStageVolume: node.nodeStage,
  NodeUnstageVolume: node.nodeUnstage,
  NodePublishVolume: node.nodePublish,
  NodeUnpublishVolume: node.nodeUnpublish,
  NodeGetVolumeStats: node.nodeGetVolumeStats,
  NodeExpandVolume: node.nodeExpand,
};

function toStatus(err: unknown): Partial<grpc.StatusObject> {
  if (err instanceof CsiError) return { code: err.grpcCode, details: err.message };
  return { code: grpc.status.INTERNAL, details: err instanceof Error ? err.message : String(err) };
}

/** gRPC's unary implementation for one handler; methods left out answer UNIMPLEMENTED. */
function unary(d: Driver, method: string, handler: Handler): grpc.handleUnaryCall<unknown, object> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => handler(d, call.request as never))
      .then(
        (res) => callback(null, res),
        (err: unknown) => {
          const s = toStatus(err);
          if (s.code === grpc.status.INTERNAL) d.log.error({ err, method }, 'CSI call failed');
          else d.log.debug({ method, code: s.code, details: s.details }, 'CSI call refused');
          callback(s);
        },
      );
  };
}

/**
 * Binds `server` to a unix socket only root may open: made 0600 from the start
 * (umask), not opened to all and narrowed after, in a 0700 directory when it
 * makes one. A stale socket file is replaced.
 */
export async function bindPrivateSocket(server: grpc.Server, socket: string): Promise<void> {
  await mkdir(path.dirname(socket), { recursive: true, mode: 0o700 });
  await rm(socket, { force: true });
  const umask = process.umask(0o177);
  try {
    await new Promise<void>((resolve, reject) =>
      server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
    );
  } finally {
    process.umask(umask);
  }
  await chmod(socket, 0o600);
}

export interface CsiServer {
  socket: string;
  stop(): Promise<void>;
}

export async function startCsiServer(d: Driver, socket: string): Promise<CsiServer> {
  const services = loadCsiServices();
  const server = new grpc.Server();
  const impls: Array<[grpc.ServiceClientConstructor, Record<string, Handler>]> = [
    [services.Identity, identity(d)],
    [services.Controller, CONTROLLER],
    [services.Node, NODE],
  ];
  for (const [svc, handlers] of impls)
    server.addService(svc.service, Object.fromEntries(Object.entries(handlers).map(([m, h]) => [m, unary(d, m, h)])));
  await bindPrivateSocket(server, socket);
  return {
    socket,
    stop: async () => {
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      await rm(socket, { force: true });
    },
  };
}

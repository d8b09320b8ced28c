// A CSI driver's Node (and Identity) service as the node agent calls it, over
// the unix socket the driver registered. One client per endpoint; a call's
// gRPC status travels on as `code` on the error (grpc.status).
import * as grpc from '@grpc/grpc-js';
import { loadCsiServices } from '../csi/proto.js';

/** How long one node call may take: staging may make a filesystem, so generous (the kubelet's csiTimeout is 2 min). */
const CALL_TIMEOUT_MS = 120_000;

export type NodeMethod =
  | 'NodeGetInfo'
  | 'NodeGetCapabilities'
  | 'NodeStageVolume'
  | 'NodeUnstageVolume'
  | 'NodePublishVolume'
  | 'NodeUnpublishVolume'
  | 'NodeGetVolumeStats'
  | 'NodeExpandVolume';

export interface NodeInfo {
  nodeId: string;
  maxVolumesPerNode: number;
  accessibleTopology?: { segments?: Record<string, string> } | null;
}

export interface DriverClient {
  node(method: NodeMethod, request: object): Promise<Record<string, unknown>>;
  close(): void;
}

type Unary = (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: object) => void) => void;

export function driverClient(endpoint: string): DriverClient {
  const { Node } = loadCsiServices();
  const client = new Node(`unix://${endpoint}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & Record<string, Unary>;
  return {
    node: (method, request) =>
      new Promise((resolve, reject) =>
        client[method]!.call(client, request, new grpc.Metadata(), { deadline: Date.now() + CALL_TIMEOUT_MS }, (err, res) =>
          err ? reject(err) : resolve(res as Record<string, unknown>),
        ),
      ),
    close: () => client.close(),
  };
}

/** The node RPCs the driver offers (NodeGetCapabilities' rpc types). */
export async function nodeCapabilities(client: DriverClient): Promise<Set<string>> {
  const res = (await client.node('NodeGetCapabilities', {})) as { capabilities?: Array<{ rpc?: { type?: string } }> };
  return new Set((res.capabilities ?? []).flatMap((c) => (c.rpc?.type ? [c.rpc.type] : [])));
}

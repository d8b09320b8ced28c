// The VMI subresources that are streams, upgraded to WebSocket: for now the
// serial console (GET virtualmachineinstances/NAME/console, subprotocol
// plain.kubevirt.io, raw bytes in binary messages). Each is checked here as
// KubeVirt's virt-api checks it, then proxied to the VMI's node (vmi-node.ts),
// which serves the stream and keeps one console per VMI. Another stream (VNC,
// a port) is one more streamRoute: its check and its path on the node.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstance } from '../../kubevirt/types.js';
import { isUpgrade, takeUpgrade } from '../../kubelet-api/upgrade.js';
import { badRequest, conflict } from '../errors.js';
import { spliceUpgrade, type VmiNodeClient } from '../vmi-node.js';
import { NAMESPACED, nameParams, type NameParams } from './params.js';
import { readVmi } from './vmi.js';

export interface VmiStreamRoutesOptions {
  kubevirt: KubevirtApi;
  nodes: VmiNodeClient;
}

/** virt-api's validateVMIForConsole: 400 (which virtctl console retries) until the VMI runs, 409 once it failed. */
export function checkConsole(vmi: VirtualMachineInstance): void {
  if (vmi.spec.domain?.devices?.autoattachSerialConsole === false) throw badRequest('No serial consoles are present.');
  if (vmi.status?.phase === 'Failed') throw conflict('virtualmachineinstance', vmi.metadata.name!, 'VMI is in failed status');
  if (vmi.status?.phase !== 'Running') throw badRequest('VMI is not running');
}

export interface StreamRoute {
  /** Authorized as virtualmachineinstances/<subresource>. */
  subresource: string;
  /** The route under the VMI (it may hold parameters); default the subresource. */
  path?: string;
  check(vmi: VirtualMachineInstance, req: FastifyRequest): void;
  /** Where on the node; default the same path and no query. */
  nodeTarget?(req: FastifyRequest): { subresource: string; query?: string };
}

export function streamRoute(app: FastifyInstance, opts: VmiStreamRoutesOptions, route: StreamRoute): void {
  app.get<{ Params: NameParams }>(
    `${NAMESPACED}/virtualmachineinstances/:name/${route.path ?? route.subresource}`,
    { schema: { params: nameParams }, config: { authorize: { resource: 'virtualmachineinstances', subresource: route.subresource } } },
    async (req, reply) => {
      if (!isUpgrade(req.raw)) throw badRequest(`${route.subresource} is a WebSocket: send an upgrade request`);
      const { namespace, name } = req.params;
      const vmi = await readVmi(opts.kubevirt, req.params);
      route.check(vmi, req);
      const node = vmi.status?.nodeName;
      if (!node) throw badRequest('VMI is not running');
      // The node answers before anything is upgraded: its refusal is an HTTP error virtctl shows.
      const at = route.nodeTarget?.(req) ?? { subresource: route.subresource };
      const upstream = await opts.nodes.upgrade({ node, namespace, name, ...at }, req.raw);
      reply.hijack();
      const log = req.log.child({ vmi: `${namespace}/${name}`, uid: vmi.metadata.uid, node, user: req.user?.username });
      log.info({ subresource: route.subresource }, 'stream opened');
      await spliceUpgrade(takeUpgrade(req.raw), upstream);
      log.info({ subresource: route.subresource }, 'stream closed');
    },
  );
}

export async function vmiStreamRoutes(app: FastifyInstance, opts: VmiStreamRoutesOptions): Promise<void> {
  streamRoute(app, opts, { subresource: 'console', check: checkConsole });
}

// The subresources that are streams, upgraded to WebSocket (subprotocol
// plain.kubevirt.io, raw bytes in binary messages): a VMI's serial console,
// its VNC display (?preserveSession=), and a port of a VMI or of a VM's VMI
// (portforward/PORT[/tcp|udp], one WebSocket per forwarded connection, which
// virtctl port-forward and ssh open). Each is checked here as KubeVirt's
// virt-api checks it, then proxied to the VMI's node (vmi-node.ts), which
// serves the stream, keeps one console and one VNC session per VMI, and opens
// the port from the node to the VMI's pod address.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstance } from '../../kubevirt/types.js';
import { isUpgrade, takeUpgrade } from '../../kubelet-api/upgrade.js';
import { badRequest, conflict, fromApiError } from '../errors.js';
import { spliceUpgrade, type VmiNodeClient } from '../vmi-node.js';
import { NAMESPACED, nameParams, type NameParams } from './params.js';
import { isPaused, readVmi } from './vmi.js';

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

/** virt-api's validateVMIForVNC, and its dialer's refusal of a VMI that is not running. */
export function checkVnc(vmi: VirtualMachineInstance): void {
  if (vmi.spec.domain?.devices?.autoattachGraphicsDevice === false) throw badRequest('No graphics devices are present.');
  checkConnectable(vmi);
}

/** virt-api's validateVMIForPortForward: a paused VMI is 409; then its dialer's refusal of one not running. */
export function checkPortForward(vmi: VirtualMachineInstance): void {
  if (isPaused(vmi)) throw conflict('virtualmachineinstance', vmi.metadata.name!, 'VMI is paused');
  checkConnectable(vmi);
}

/** virt-api reaches a VMI's handler only once it runs. */
function checkConnectable(vmi: VirtualMachineInstance): void {
  const phase = vmi.status?.phase ?? '';
  if (phase !== 'Running') throw badRequest(`Unable to connect to VM because phase is ${phase} instead of Running`);
}

/** The port and protocol of a portforward path, or a 400 naming the one that is wrong. */
export function forwardPath(params: { port: string; protocol?: string }): string {
  const port = /^\d{1,5}$/.test(params.port) ? Number(params.port) : NaN;
  if (!(port >= 1 && port <= 65535)) throw badRequest(`port ${JSON.stringify(params.port)} must be a number from 1 to 65535`);
  const protocol = params.protocol ?? 'tcp';
  if (protocol !== 'tcp' && protocol !== 'udp') throw badRequest(`protocol ${JSON.stringify(protocol)} must be tcp or udp`);
  return `portforward/${port}/${protocol}`;
}

/**
 * The VMI of VM namespace/name, as virt-api's FetchVirtualMachineInstanceForVM
 * finds it: 404 for no VM, 409 while the VM has not created one, 404 for no
 * VMI, and the VMI must be that VM's.
 */
export async function readVmiOfVm(kubevirt: KubevirtApi, params: NameParams): Promise<VirtualMachineInstance> {
  const vm = await kubevirt.getVm(params.namespace, params.name).catch((err: unknown) => {
    throw fromApiError(err, 'virtualmachine', params.name);
  });
  if (!vm.status?.created) throw conflict('virtualmachine', params.name, 'VMI is not started');
  const vmi = await readVmi(kubevirt, params);
  if (!vmi.metadata.ownerReferences?.some((o) => o.uid === vm.metadata.uid)) {
    throw conflict('virtualmachine', params.name, 'VMI is not owned by VM');
  }
  return vmi;
}

export interface StreamRoute {
  /** Whose subresource: a VMI's (the default) or a VM's, whose VMI streams. */
  resource?: 'virtualmachineinstances' | 'virtualmachines';
  /** Authorized as <resource>/<subresource>. */
  subresource: string;
  /** The route under the VMI (it may hold parameters); default the subresource. */
  path?: string;
  check(vmi: VirtualMachineInstance, req: FastifyRequest): void;
  /** Where on the node; default the same path and no query. */
  nodeTarget?(req: FastifyRequest): { subresource: string; query?: string };
}

export function streamRoute(app: FastifyInstance, opts: VmiStreamRoutesOptions, route: StreamRoute): void {
  const resource = route.resource ?? 'virtualmachineinstances';
  app.get<{ Params: NameParams }>(
    `${NAMESPACED}/${resource}/:name/${route.path ?? route.subresource}`,
    { schema: { params: nameParams }, config: { authorize: { resource, subresource: route.subresource } } },
    async (req, reply) => {
      if (!isUpgrade(req.raw)) throw badRequest(`${route.subresource} is a WebSocket: send an upgrade request`);
      const { namespace } = req.params;
      const vmi = resource === 'virtualmachines' ? await readVmiOfVm(opts.kubevirt, req.params) : await readVmi(opts.kubevirt, req.params);
      const name = vmi.metadata.name!;
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
  streamRoute(app, opts, {
    subresource: 'vnc',
    check: checkVnc,
    nodeTarget: (req) => {
      const preserve = (req.query as { preserveSession?: string }).preserveSession;
      return { subresource: 'vnc', ...(preserve === undefined ? {} : { query: `preserveSession=${encodeURIComponent(preserve)}` }) };
    },
  });
  for (const resource of ['virtualmachineinstances', 'virtualmachines'] as const) {
    for (const path of ['portforward/:port', 'portforward/:port/:protocol']) {
      streamRoute(app, opts, {
        resource,
        subresource: 'portforward',
        path,
        check: checkPortForward,
        nodeTarget: (req) => ({ subresource: forwardPath(req.params as { port: string; protocol?: string }) }),
      });
    }
  }
}

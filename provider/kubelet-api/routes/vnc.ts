// /vnc/:namespace/:pod (GET), vkvm's own kubelet API endpoint: the VM's VNC
// display, as a WebSocket carrying raw RFB bytes in binary messages (KubeVirt's
// plain.kubevirt.io, which virtctl vnc speaks), for whoever has nodes/proxy
// (through kube-apiserver's node proxy), authorized like exec: create on
// nodes/proxy. The same display is served at KubeVirt's VMI path for the
// subresource API (virtctl vnc), authorized as that VMI's vnc subresource, as
// vmi-subresources.ts does.
// One session per VM, as virt-handler keeps it: a new one closes the one
// before, unless it asks preserveSession=true, which is then refused with 503.
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { createWebSocketStream, type WebSocket } from 'ws';
import { BadRequestError, UnavailableError } from '../errors.js';
import { releaseOnClose, type SessionLimiter } from '../session-limiter.js';
import { closeWhenIdle } from '../streaming/idle-timer.js';
import { requestedTransport } from '../streaming/negotiate.js';
import { splice } from '../streaming/splice.js';
import { upgradeToWebSocket, webSocketServer } from '../streaming/websocket.js';
import { takeUpgrade } from '../upgrade.js';
import type { PodName, VmAccess } from '../vm-access.js';
import { VMI_SUBRESOURCE_PATH, vmiSubresource } from './vmi-subresources.js';
import { negotiateUpgrade } from './negotiate-upgrade.js';
import { isSet, queryFlag } from './query-flag.js';

export const VNC_PROTOCOLS = ['plain.kubevirt.io'] as const;

interface PodParams {
  namespace: string;
  pod: string;
}

interface VmiParams {
  namespace: string;
  name: string;
}

const podParamsSchema = {
  type: 'object',
  required: ['namespace', 'pod'],
  properties: { namespace: { type: 'string' }, pod: { type: 'string' } },
} as const;

const vmiParamsSchema = {
  type: 'object',
  required: ['namespace', 'name'],
  properties: { namespace: { type: 'string', minLength: 1 }, name: { type: 'string', minLength: 1 } },
} as const;

export interface VncOptions {
  vms: VmAccess;
  sessions: SessionLimiter;
  /** A session without traffic for this long is closed (IdleTimer). */
  idleTimeoutMs: number;
}

export async function vncRoutes(app: FastifyInstance, opts: VncOptions): Promise<void> {
  const wss = webSocketServer(VNC_PROTOCOLS);
  /** The open session of each VM, by UID. */
  const open = new Map<string, WebSocket>();
  const sockets = new Set<Duplex>();
  app.addHook('preClose', async () => {
    for (const socket of sockets) socket.destroy();
  });

  /** `of` names the VM in messages and logs: its pod, or its VMI. */
  async function serve(
    req: FastifyRequest<{ Querystring: { preserveSession?: string } }>,
    reply: FastifyReply,
    pod: () => PodName,
    of: string,
  ): Promise<void> {
    if (requestedTransport(req.headers) === 'spdy')
      throw new BadRequestError('unable to upgrade: the VNC display is served over WebSocket only');
    negotiateUpgrade(req, reply, { spdy: [], websocket: VNC_PROTOCOLS, websocketUnnamed: true });
    const display = await opts.vms.vncDisplay(pod());
    if (isSet(req.query.preserveSession) && open.has(display.uid)) {
      throw new UnavailableError(`the VNC display of ${of} is in use by another session, which preserveSession keeps`);
    }
    const vnc = await display.connect();
    releaseOnClose(opts.sessions.acquire(req.user!, 'vnc'), req.raw.socket);
    reply.hijack();
    const log = req.log.child({ vm: of, endpoint: 'vnc', user: req.user?.username });
    const upgrade = takeUpgrade(req.raw);
    sockets.add(upgrade.socket);
    upgrade.socket.once('close', () => sockets.delete(upgrade.socket));
    let ws: WebSocket;
    try {
      ws = await upgradeToWebSocket(wss, req.raw, upgrade);
    } catch (err) {
      vnc.destroy();
      log.warn({ err }, 'VNC session setup failed');
      return;
    }
    open.get(display.uid)?.close(1000, 'a new VNC session replaced this one');
    open.set(display.uid, ws);
    const idle = closeWhenIdle(ws, opts.idleTimeoutMs, log);
    log.info('VNC session started');
    const client = createWebSocketStream(ws);
    client.on('error', (err) => log.debug({ err }, 'VNC client stream failed'));
    const done = splice(client, vnc);
    idle.watch([vnc]);
    const err = await done;
    idle.stop();
    if (open.get(display.uid) === ws) open.delete(display.uid);
    log.info({ err }, 'VNC session ended');
  }

  const querystring = { type: 'object', properties: { preserveSession: queryFlag } } as const;
  app.get<{ Params: PodParams; Querystring: { preserveSession?: string } }>(
    '/vnc/:namespace/:pod',
    { schema: { params: podParamsSchema, querystring } },
    (req, reply) => {
      const { namespace, pod } = req.params;
      return serve(req, reply, () => ({ namespace, name: pod }), `pod ${namespace}/${pod}`);
    },
  );
  // KubeVirt's path, for the subresource API: authorized as that VMI's vnc, as virtctl vnc is.
  app.get<{ Params: VmiParams; Querystring: { preserveSession?: string } }>(
    `${VMI_SUBRESOURCE_PATH}/vnc`,
    { schema: { params: vmiParamsSchema, querystring }, config: { authorizeAs: vmiSubresource('vnc') } },
    (req, reply) => {
      const { namespace, name } = req.params;
      return serve(req, reply, () => opts.vms.vmiPod(namespace, name), `VMI ${namespace}/${name}`);
    },
  );
}

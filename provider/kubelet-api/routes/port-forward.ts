// /portForward/:namespace/:pod[/:uid] (GET and POST), reached through
// kube-apiserver's pods/portforward for `kubectl port-forward`. The request
// arrives as an upgrade (see upgrade.ts: it has passed auth like any request,
// with verb create on nodes/proxy) to SPDY (portforward.k8s.io: ports chosen
// per stream pair) or WebSocket (v4.channel.k8s.io: ports in the `port`
// query). Connections are made from the node to the pod's own address only.
import type { Duplex } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BadRequestError, NotFoundError } from '../errors.js';
import { releaseOnClose, type SessionLimiter } from '../session-limiter.js';
import { IdleTimer } from '../streaming/idle-timer.js';
import { PORT_FORWARD_SPDY_PROTOCOLS, PORT_FORWARD_WEBSOCKET_PROTOCOLS } from '../streaming/negotiate.js';
import type { ForwardTarget } from '../streaming/port-forward.js';
import { servePortForwardSpdy } from '../streaming/port-forward-spdy.js';
import { parsePorts, servePortForwardWebSocket } from '../streaming/port-forward-websocket.js';
import { upgradeToSpdy } from '../streaming/spdy-connection.js';
import { upgradeToWebSocket, webSocketServer } from '../streaming/websocket.js';
import { takeUpgrade } from '../upgrade.js';
import type { VmAccess } from '../vm-access.js';
import { negotiateUpgrade } from './negotiate-upgrade.js';

interface Params {
  namespace: string;
  pod: string;
  uid?: string;
}

const paramsSchema = {
  type: 'object',
  required: ['namespace', 'pod'],
  properties: { namespace: { type: 'string' }, pod: { type: 'string' }, uid: { type: 'string' } },
} as const;

const querySchema = {
  type: 'object',
  properties: { port: { type: 'array', items: { type: 'string' } } },
} as const;

export interface PortForwardOptions {
  vms: VmAccess;
  sessions: SessionLimiter;
  /** A session without traffic for this long is closed (IdleTimer). */
  idleTimeoutMs: number;
}

export async function portForwardRoutes(app: FastifyInstance, opts: PortForwardOptions): Promise<void> {
  const wss = webSocketServer(PORT_FORWARD_WEBSOCKET_PROTOCOLS);
  // server.close() waits for upgraded connections but never closes them.
  const sockets = new Set<Duplex>();
  app.addHook('preClose', async () => {
    for (const socket of sockets) socket.destroy();
  });

  async function serve(req: FastifyRequest<{ Params: Params; Querystring: { port?: string[] } }>, reply: FastifyReply): Promise<void> {
    const negotiated = negotiateUpgrade(req, reply, {
      spdy: PORT_FORWARD_SPDY_PROTOCOLS,
      websocket: PORT_FORWARD_WEBSOCKET_PROTOCOLS,
      websocketUnnamed: true,
    });
    // Over SPDY the client names a port per stream pair; the query is the WebSocket's.
    const ports = negotiated.transport === 'websocket' ? parsePorts(req.query.port ?? []) : [];
    if (typeof ports === 'string') throw new BadRequestError(ports);
    const { namespace, pod, uid } = req.params;
    const podPorts = await opts.vms.podPorts({ namespace, name: pod });
    if (uid && uid !== podPorts.uid) throw new NotFoundError(`pod ${namespace}/${pod} with UID ${uid} not found on this node`);
    releaseOnClose(opts.sessions.acquire(req.user!, 'portForward'), req.raw.socket);
    reply.hijack();
    const log = req.log.child({ pod: `${namespace}/${pod}`, endpoint: 'portForward', transport: negotiated.transport });
    const upgrade = takeUpgrade(req.raw);
    sockets.add(upgrade.socket);
    upgrade.socket.once('close', () => sockets.delete(upgrade.socket));
    const idle = new IdleTimer(opts.idleTimeoutMs);
    idle.signal.addEventListener('abort', () => {
      log.info({ reason: (idle.signal.reason as Error).message }, 'port-forward session closed');
      upgrade.socket.destroy();
    });
    const target: ForwardTarget = { ports: podPorts, podFullName: `${pod}_${namespace}`, watch: (s) => idle.watch([s]) };
    log.debug({ ports }, 'port-forward session started');
    try {
      if (negotiated.transport === 'spdy') await servePortForwardSpdy(upgradeToSpdy(upgrade, negotiated.protocol, log), target, log);
      else await servePortForwardWebSocket(await upgradeToWebSocket(wss, req.raw, upgrade), ports, target, log);
    } catch (err) {
      log.warn({ err }, 'port-forward session setup failed');
    } finally {
      idle.stop();
    }
    log.debug('port-forward session ended');
  }

  for (const url of ['/portForward/:namespace/:pod', '/portForward/:namespace/:pod/:uid']) {
    app.route<{ Params: Params; Querystring: { port?: string[] } }>({
      method: ['GET', 'POST'],
      url,
      schema: { params: paramsSchema, querystring: querySchema },
      handler: serve,
    });
  }
}

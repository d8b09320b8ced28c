// GET …/virtualmachineinstances/NAME/portforward/PORT[/tcp|udp] on the node,
// at the subresource API's own path and authorized as that VMI subresource
// (vmi-subresources.ts), as virt-handler serves virt-api: one WebSocket
// (plain.kubevirt.io) per forwarded connection, raw bytes both ways (over UDP,
// a message per datagram), to PORT at the VMI's pod address, from the node.
// The connection is made before the upgrade, so one the guest refuses is an
// HTTP error the subresource API relays. Each stream holds a slot of the
// node's streaming caps and is closed after --streaming-connection-idle-timeout
// without traffic either way, as the pod's port-forward is. `virtctl
// port-forward` and `virtctl ssh` come this way.
import type { Socket as UdpSocket } from 'node:dgram';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { WebSocket } from 'ws';
import { BadRequestError, HttpError } from '../errors.js';
import { releaseOnClose, type SessionLimiter } from '../session-limiter.js';
import { closeWhenIdle } from '../streaming/idle-timer.js';
import {
  acceptPlainWebSocket,
  offersPlainProtocol,
  plainWebSocketServer,
  relayDatagrams,
  relayPlain,
  PLAIN_PROTOCOL,
} from '../streaming/plain-websocket.js';
import { isUpgrade, takeUpgrade } from '../upgrade.js';
import type { VmAccess } from '../vm-access.js';
import { VMI_SUBRESOURCE_PATH, vmiSubresource } from './vmi-subresources.js';

type Forward = { kind: 'tcp'; socket: Socket } | { kind: 'udp'; socket: UdpSocket };

interface Params {
  namespace: string;
  name: string;
  port: string;
  protocol?: string;
}

const paramsSchema = {
  type: 'object',
  required: ['namespace', 'name', 'port'],
  properties: {
    namespace: { type: 'string', minLength: 1 },
    name: { type: 'string', minLength: 1 },
    port: { type: 'string' },
    protocol: { type: 'string' },
  },
} as const;

/** The port and protocol of the path, or a 400 naming the one that is wrong. */
export function forwardTarget(params: Params): { port: number; protocol: 'tcp' | 'udp' } {
  const port = /^\d{1,5}$/.test(params.port) ? Number(params.port) : NaN;
  if (!(port >= 1 && port <= 65535)) throw new BadRequestError(`port ${JSON.stringify(params.port)} must be a number from 1 to 65535`);
  const protocol = params.protocol ?? 'tcp';
  if (protocol !== 'tcp' && protocol !== 'udp') throw new BadRequestError(`protocol ${JSON.stringify(protocol)} must be tcp or udp`);
  return { port, protocol };
}

export interface VmiPortForwardOptions {
  vms: VmAccess;
  /** Each forwarded connection counts as a session (endpoint portForward). */
  sessions: SessionLimiter;
  /** A stream without traffic for this long is closed (IdleTimer). */
  idleTimeoutMs: number;
}

export async function vmiPortForwardRoutes(app: FastifyInstance, opts: VmiPortForwardOptions): Promise<void> {
  const { vms } = opts;
  const wss = plainWebSocketServer();
  // server.close() waits for upgraded connections but never closes them.
  const open = new Set<WebSocket>();
  app.addHook('preClose', async () => {
    for (const ws of open) ws.terminate();
  });
  for (const url of [`${VMI_SUBRESOURCE_PATH}/portforward/:port`, `${VMI_SUBRESOURCE_PATH}/portforward/:port/:protocol`]) {
    app.get<{ Params: Params }>(
      url,
      { schema: { params: paramsSchema }, config: { authorizeAs: vmiSubresource('portforward') } },
      async (req, reply) => {
        if (!isUpgrade(req.raw)) throw new BadRequestError('portforward is a WebSocket: send an upgrade request');
        if (!offersPlainProtocol(req.raw)) throw new BadRequestError(`portforward speaks the WebSocket subprotocol ${PLAIN_PROTOCOL}`);
        const { port, protocol } = forwardTarget(req.params);
        const { namespace, name } = req.params;
        const ref = vms.vmiPod(namespace, name);
        const ports = await vms.podPorts(ref);
        const target: Forward = await (
          protocol === 'udp'
            ? ports.connectUdp(port).then((socket) => ({ kind: 'udp' as const, socket }))
            : ports.connect(port).then((socket) => ({ kind: 'tcp' as const, socket }))
        ).catch((err: unknown) => {
          if (err instanceof HttpError) throw err;
          // The guest (or its pod network) refused: no stream to offer.
          throw new HttpError(502, `error forwarding port ${port}/${protocol} to VMI ${namespace}/${name}: ${(err as Error).message}`);
        });
        const close = () => (target.kind === 'tcp' ? target.socket.destroy() : target.socket.close());
        try {
          releaseOnClose(opts.sessions.acquire(req.user!, 'portForward'), req.raw.socket);
        } catch (err) {
          close();
          throw err;
        }
        reply.hijack();
        const log = req.log.child({ vmi: `${namespace}/${name}`, uid: ref.vmiUid, port, protocol, user: req.user?.username });
        const ws = await acceptPlainWebSocket(wss, req.raw, takeUpgrade(req.raw));
        if (!ws) return close();
        open.add(ws);
        log.debug('port-forward stream opened');
        const idle = closeWhenIdle(ws, opts.idleTimeoutMs, log);
        const relayed = target.kind === 'tcp' ? relayPlain(ws, target.socket) : relayDatagrams(ws, target.socket);
        // Now that the relay reads it (see IdleTimer.watch); a UDP socket's datagrams are messages.
        idle.watch([target.socket], target.kind === 'tcp' ? 'data' : 'message');
        await relayed;
        idle.stop();
        open.delete(ws);
        log.debug('port-forward stream closed');
      },
    );
  }
}

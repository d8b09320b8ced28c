// Node hands a request with an Upgrade header to the server's 'upgrade' event
// instead of its request handler, so it would never reach fastify, nor the
// auth hook. This sends such requests through fastify's router like any other
// (as @fastify/websocket does): authentication, authorization, route schemas
// and the error handler all apply, and a rejection (401, 403, 404, 400) goes
// out as a plain HTTP response on the socket. A route that accepts the upgrade
// takes the socket with takeUpgrade().
import { ServerResponse, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';

export interface Upgrade {
  socket: Duplex;
  /** Bytes the client sent after the request head. */
  head: Buffer;
}

const pending = new WeakMap<IncomingMessage, { upgrade: Upgrade; res: ServerResponse }>();

export function routeUpgradesThroughFastify(app: FastifyInstance): void {
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    // Node no longer watches an upgraded socket; an unhandled error would crash the process.
    socket.on('error', (err) => app.log.debug({ err }, 'upgraded connection failed'));
    const res = new ServerResponse(req);
    res.shouldKeepAlive = false;
    res.assignSocket(socket as Socket);
    // An answer other than the upgrade is the last thing on this connection.
    res.on('finish', () => socket.end());
    pending.set(req, { upgrade: { socket, head }, res });
    try {
      app.routing(req, res);
    } catch (err) {
      app.log.warn({ err }, 'upgrade request could not be routed');
      socket.destroy();
    }
  });
}

/** Whether `req` arrived as an upgrade whose socket is still available. */
export function isUpgrade(req: IncomingMessage): boolean {
  return pending.has(req);
}

/**
 * Takes the connection of an upgrade request away from its HTTP response;
 * the caller then owns the socket. Call only after isUpgrade(req).
 */
export function takeUpgrade(req: IncomingMessage): Upgrade {
  const entry = pending.get(req)!;
  pending.delete(req);
  entry.res.detachSocket(entry.upgrade.socket as Socket);
  return entry.upgrade;
}

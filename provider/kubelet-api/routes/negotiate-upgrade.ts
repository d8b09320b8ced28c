// The upgrade checks every streaming route makes before anything is opened
// (exec, attach, port-forward): the transport asked for, and a protocol version
// both sides speak, decided as the kubelet's httpstream.Handshake and wsstream
// decide. Failures are plain HTTP answers.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { BadRequestError, ForbiddenError } from '../errors.js';
import { ACCEPTED_PROTOCOLS_HEADER, negotiate, offeredProtocols, PROTOCOL_HEADER, requestedTransport } from '../streaming/negotiate.js';
import { isUpgrade } from '../upgrade.js';

export type Negotiated<P extends string> = { transport: 'spdy'; protocol: P } | { transport: 'websocket' };

export interface UpgradeProtocols<P extends string> {
  spdy: readonly P[];
  websocket: readonly string[];
  /** A WebSocket client may offer no subprotocol at all (port-forward). */
  websocketUnnamed?: boolean;
}

export function negotiateUpgrade<P extends string>(
  req: FastifyRequest,
  reply: FastifyReply,
  supported: UpgradeProtocols<P>,
): Negotiated<P> {
  const transport = requestedTransport(req.headers);
  if (!transport || !isUpgrade(req.raw)) throw new BadRequestError('unable to upgrade: missing upgrade headers in request');
  if (transport === 'websocket') {
    const offered = offeredProtocols(req.headers['sec-websocket-protocol']);
    if (offered.length === 0 && supported.websocketUnnamed) return { transport };
    if (!negotiate(offered, supported.websocket)) {
      throw new BadRequestError(
        `unable to upgrade: requested protocol(s) are not supported: [${offered.join(' ')}]; supports [${supported.websocket.join(' ')}]`,
      );
    }
    return { transport };
  }
  const offered = offeredProtocols(req.headers[PROTOCOL_HEADER.toLowerCase()]);
  if (offered.length === 0) throw new BadRequestError(`unable to upgrade: ${PROTOCOL_HEADER} is required`);
  const protocol = negotiate(offered, supported.spdy);
  if (!protocol) {
    void reply.header(ACCEPTED_PROTOCOLS_HEADER, supported.spdy.join(', '));
    throw new ForbiddenError(
      `unable to upgrade: unable to negotiate protocol: client supports [${offered.join(' ')}], server accepts [${supported.spdy.join(' ')}]`,
    );
  }
  return { transport, protocol };
}

// KubeVirt's plain.kubevirt.io WebSocket, as virt-handler serves it to
// virt-api: raw bytes both ways in binary messages, no channel prefix. What is
// carried (a serial console, a VNC display, a guest port) is the caller's
// Duplex; this module only accepts the upgrade and relays (datagrams: a
// message is one datagram each way).
import type { Socket as UdpSocket } from 'node:dgram';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { Upgrade } from '../upgrade.js';
import { MAX_MESSAGE_BYTES } from './websocket.js';

export const PLAIN_PROTOCOL = 'plain.kubevirt.io';

/** Output queued for a slow client before the source is paused until it drains. */
const HIGH_WATER_BYTES = 1024 * 1024;

export function plainWebSocketServer(): WebSocketServer {
  return new WebSocketServer({
    noServer: true,
    maxPayload: MAX_MESSAGE_BYTES,
    handleProtocols: (offered) => (offered.has(PLAIN_PROTOCOL) ? PLAIN_PROTOCOL : false),
  });
}

/** Whether the upgrade request offers the plain subprotocol (checked before anything is opened). */
export function offersPlainProtocol(req: IncomingMessage): boolean {
  const offered = String(req.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim());
  return offered.includes(PLAIN_PROTOCOL);
}

/** Completes the handshake; undefined when it failed (ws has then answered and closed the socket). */
export function acceptPlainWebSocket(wss: WebSocketServer, req: IncomingMessage, upgrade: Upgrade): Promise<WebSocket | undefined> {
  return new Promise((resolve) => {
    const onClose = () => resolve(undefined);
    upgrade.socket.once('close', onClose);
    wss.handleUpgrade(req, upgrade.socket, upgrade.head, (ws) => {
      upgrade.socket.off('close', onClose);
      resolve(ws);
    });
  });
}

const bytesOf = (data: RawData): Buffer => (Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data));

/**
 * Relays between the client and `target` until either ends: the client
 * closing ends the target's writable side; the target ending (or failing)
 * closes the client normally. Resolves once both are done.
 */
export function relayPlain(ws: WebSocket, target: Duplex): Promise<void> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      if (ws.readyState === ws.OPEN) ws.close(1000);
      target.end();
      target.destroy();
      resolve();
    };
    // Backpressure: a target that reads slowly (a guest port) stops the client's socket being read.
    ws.on('message', (data) => {
      if (!target.write(bytesOf(data))) ws.pause();
    });
    target.on('drain', () => ws.resume());
    target.on('data', (chunk: Buffer) => {
      ws.send(chunk, { binary: true }, () => {
        if (target.isPaused() && ws.bufferedAmount < HIGH_WATER_BYTES) target.resume();
      });
      if (ws.bufferedAmount >= HIGH_WATER_BYTES) target.pause();
    });
    ws.once('close', finish);
    ws.once('error', finish);
    target.once('end', finish);
    target.once('error', finish);
    target.once('close', finish);
  });
}

/**
 * Relays between the client and a connected UDP socket: each message is one
 * datagram to the guest, each datagram from it one message. Ends, closing
 * both, when the client goes or the socket fails (an ICMP refusal shows as
 * ECONNREFUSED on a connected socket). Resolves once done.
 */
export function relayDatagrams(ws: WebSocket, socket: UdpSocket): Promise<void> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      if (ws.readyState === ws.OPEN) ws.close(1000);
      socket.close();
      resolve();
    };
    ws.on('message', (data) => {
      if (!done) socket.send(bytesOf(data));
    });
    socket.on('message', (datagram) => ws.send(datagram, { binary: true }));
    ws.once('close', finish);
    ws.once('error', finish);
    socket.once('error', finish);
  });
}

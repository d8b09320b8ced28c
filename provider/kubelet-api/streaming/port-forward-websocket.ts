// port-forward over WebSocket (v4.channel.k8s.io, binary), as the kubelet
// serves it (cri/streaming/portforward/websocket.go): the ports come in the
// query, one connection each, for the life of the WebSocket. Port i has two
// channels, data 2i and error 2i+1, and every message starts with its
// channel byte; the first message on each channel is the port, two bytes,
// little-endian. The WebSocket closes once every port's connection is over.
import { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import type { SessionLogger } from './connection.js';
import { forwardPort, type ForwardTarget } from './port-forward.js';

/**
 * The ports of a WebSocket request's `port` query parameters (repeated, or
 * comma-separated), or the kubelet's message for the first one it cannot read.
 */
export function parsePorts(values: string[]): number[] | string {
  if (values.length === 0) return 'query parameter "port" is required';
  const ports: number[] = [];
  for (const value of values) {
    if (value === '') return 'query parameter "port" cannot be empty';
    for (const p of value.split(',')) {
      if (!/^\d+$/.test(p) || Number(p) > 65535) return `unable to parse "${value}" as a port`;
      if (Number(p) < 1) return `port "${value}" must be > 0`;
      ports.push(Number(p));
    }
  }
  return ports;
}

/** Serves `ports` on `ws` until every connection is over (then closes it) or the client goes. */
export async function servePortForwardWebSocket(ws: WebSocket, ports: number[], target: ForwardTarget, log: SessionLogger): Promise<void> {
  const inputs = new Map<number, Duplex>();
  const send = (channel: number, data: Buffer, callback?: (err?: Error) => void): void =>
    ws.send(Buffer.concat([Buffer.of(channel), data]), callback);
  ws.on('error', (err) => log.debug({ err }, 'WebSocket connection failed'));
  ws.on('message', (data: Buffer) => {
    const input = inputs.get(data[0]!);
    // Backpressure: stop reading the socket until the connection reads on.
    if (input && !input.push(data.subarray(1))) ws.pause();
  });
  const closed = new Promise<void>((resolve) => ws.once('close', () => resolve()));
  void closed.then(() => {
    for (const input of inputs.values()) input.destroy();
  });

  const forwards = ports.map(async (port, i) => {
    const dataChannel = 2 * i;
    const portBytes = Buffer.alloc(2);
    portBytes.writeUInt16LE(port);
    send(dataChannel, portBytes);
    send(dataChannel + 1, portBytes);
    const channel: Duplex = new Duplex({
      read: () => ws.resume(),
      write: (chunk: Buffer, _encoding, callback) => send(dataChannel, chunk, (err) => callback(err ?? null)),
      // The client cannot half-close (v4): once the guest is done, so is the connection.
      final: (callback) => {
        channel.push(null);
        callback();
      },
    });
    channel.on('error', (err) => log.debug({ err, port }, 'port-forward channel failed'));
    inputs.set(dataChannel, channel);
    const message = await forwardPort(target, port, channel);
    inputs.delete(dataChannel);
    if (message) {
      log.debug({ port, err: message }, 'forwarded connection failed');
      send(dataChannel + 1, Buffer.from(message));
    }
  });
  await Promise.race([Promise.all(forwards), closed]);
  ws.close(1000);
  await closed;
}

// Joins a client's stream to a TCP connection for port-forward, both ways.
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';

/**
 * Copies `client` to `target` and back, with backpressure both ways. Each
 * direction closes on its own: the end of the client's input half-closes the
 * connection (open it with allowHalfOpen), and the guest's end of output ends
 * the client's stream, so a client that sends its request and half-closes
 * still reads the whole answer. Resolves once the connection has closed,
 * with its error if it failed; a client stream that fails or closes before
 * its end tears the connection down.
 */
export function splice(client: Duplex, target: Socket): Promise<Error | undefined> {
  return new Promise((resolve) => {
    let failure: Error | undefined;
    let clientEnded = false;
    client.once('end', () => (clientEnded = true));
    client.pipe(target);
    target.pipe(client);
    const abandon = (): void => {
      if (!clientEnded) target.destroy();
    };
    client.once('error', abandon);
    client.once('close', abandon);
    // Gone while the connection was being opened.
    if (client.destroyed) abandon();
    target.once('error', (err) => (failure = err));
    target.once('close', () => {
      client.off('close', abandon);
      // A connection reset ends no pipe: end the client's stream here, and
      // read what it still sends to its end, so that it can close.
      if (!client.destroyed) {
        if (!client.writableEnded) client.end();
        client.resume();
      }
      resolve(failure);
    });
  });
}

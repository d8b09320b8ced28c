// Stands in for the node agents' migration relay in launcher tests: each
// listener is a unix socket in the source launcher's private run dir, and
// each connection accepted there is piped to a fresh connection to its target.
import { chmod, chown, rm } from 'node:fs/promises';
import net from 'node:net';

export interface RelayLeg {
  /** Host path the relay listens on. */
  listen: string;
  /** Host path each accepted connection is piped to. */
  dial: string;
  /** Who may connect (the source QEMU for NBD); root only when absent. */
  owner?: number;
}

export interface UnixRelay {
  /** Connections accepted per listener. */
  readonly accepted: Map<string, number>;
  /** Bytes sent from each listener's side toward its target. */
  readonly bytesForward: Map<string, number>;
  close(): Promise<void>;
}

export async function startUnixRelay(legs: RelayLeg[]): Promise<UnixRelay> {
  const accepted = new Map<string, number>();
  const bytesForward = new Map<string, number>();
  const sockets = new Set<net.Socket>();
  const servers: net.Server[] = [];
  for (const leg of legs) {
    await rm(leg.listen, { force: true });
    const server = net.createServer((a) => {
      accepted.set(leg.listen, (accepted.get(leg.listen) ?? 0) + 1);
      const b = net.connect(leg.dial);
      for (const s of [a, b]) {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => {
          a.destroy();
          b.destroy();
        });
      }
      a.on('data', (d: Buffer) => bytesForward.set(leg.listen, (bytesForward.get(leg.listen) ?? 0) + d.length));
      a.pipe(b);
      b.pipe(a);
    });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(leg.listen, resolve));
    servers.push(server);
    await chmod(leg.listen, 0o600);
    if (leg.owner !== undefined) await chown(leg.listen, leg.owner, leg.owner);
  }
  return {
    accepted,
    bytesForward,
    async close() {
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    },
  };
}

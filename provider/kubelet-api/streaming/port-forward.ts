// One forwarded connection of a port-forward session, whichever transport
// carries the session (port-forward-spdy.ts, port-forward-websocket.ts).
import type { Readable, Duplex } from 'node:stream';
import type { PodPorts } from '../vm-access.js';
import { splice } from './splice.js';

/**
 * How many connections one session forwards at once. The kubelet has no cap;
 * here each costs the agent a socket to the guest, and a tenant allowed
 * port-forward must not be able to take the node's file descriptors.
 */
export const MAX_FORWARDED_CONNECTIONS = 128;

export interface ForwardTarget {
  ports: PodPorts;
  /** The kubelet names a pod `name_namespace` in its errors. */
  podFullName: string;
  /** Counts a stream's chunks as session traffic (IdleTimer.watch). */
  watch(stream: Readable): void;
}

/**
 * Joins `client` to `port` of the pod until both sides are done, as the
 * kubelet's PortForward does. Resolves with the message for the client's
 * error channel if it failed (the kubelet's wording), else undefined; either
 * way `client` has been ended.
 */
export async function forwardPort(target: ForwardTarget, port: number, client: Duplex): Promise<string | undefined> {
  const failed = (err: Error) => `error forwarding port ${port} to pod ${target.podFullName}, uid ${target.ports.uid}: ${err.message}`;
  let socket;
  try {
    socket = await target.ports.connect(port);
  } catch (err) {
    client.end();
    // Read what the client sends to its end, so that its stream can close.
    client.resume();
    return failed(err instanceof Error ? err : new Error(String(err)));
  }
  const done = splice(client, socket);
  target.watch(client);
  target.watch(socket);
  const err = await done;
  return err ? failed(err) : undefined;
}

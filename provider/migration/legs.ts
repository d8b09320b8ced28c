// A relayed connection is two legs, the node-to-node TLS stream and the local
// unix socket, joined both ways. Losing either leg (reset, error, keepalive
// timeout, closeAll) destroys the other at once, so libvirt and QEMU fail fast
// instead of waiting for a migration timeout; a leg that ends cleanly first
// lets the other flush what it was given.
import type { Duplex } from 'node:stream';

/** Pipes a and b into each other; resolves once both are closed. */
export function joinLegs(a: Duplex, b: Duplex): Promise<void> {
  let open = 2;
  return new Promise((resolve) => {
    const follow = (leg: Duplex, other: Duplex) => () => {
      // pipe() has ended the other's writable side after a clean end: destroy it once that is flushed.
      if (leg.readableEnded && !leg.errored) {
        if (other.writableFinished) other.destroy();
        else other.once('finish', () => other.destroy());
      } else other.destroy();
      if (--open === 0) resolve();
    };
    for (const [leg, other] of [
      [a, b],
      [b, a],
    ] as const) {
      // The error is seen as the 'close' that follows it; the owner logs the pair's end.
      leg.on('error', () => {});
      if (leg.closed) queueMicrotask(follow(leg, other));
      else leg.once('close', follow(leg, other));
      leg.pipe(other);
    }
  });
}

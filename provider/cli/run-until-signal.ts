// SIGINT/SIGTERM handling of the long-running commands. Install it first
// thing: until a handler exists, a signal kills node outright, before it can
// stop what it started.

/** The abort reason of a shutdown signal. */
export class ShutdownRequested extends Error {
  constructor(readonly signal: NodeJS.Signals) {
    super(`stopped by ${signal}`);
    this.name = 'ShutdownRequested';
  }
}

/**
 * From now on, the first SIGINT or SIGTERM aborts the returned signal (an
 * orderly stop); a second one exits at once.
 */
export function shutdownSignal(): AbortSignal {
  const controller = new AbortController();
  const handler = (signal: NodeJS.Signals) => {
    if (controller.signal.aborted) process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
    controller.abort(new ShutdownRequested(signal));
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return controller.signal;
}

/** Settles after `signal` aborted (at once if it has) and `stop` ran. */
export function onShutdownSignal(stop: () => Promise<void>, signal: AbortSignal = shutdownSignal()): Promise<void> {
  return new Promise((resolve) => {
    const run = () => void stop().finally(resolve);
    if (signal.aborted) run();
    else signal.addEventListener('abort', run, { once: true });
  });
}

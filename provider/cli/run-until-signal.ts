// Runs until SIGINT/SIGTERM, then calls stop once; a second signal exits at once.
export function onShutdownSignal(stop: () => Promise<void>): Promise<void> {
  return new Promise((resolve) => {
    let stopping = false;
    const handler = (signal: NodeJS.Signals) => {
      if (stopping) process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
      stopping = true;
      void stop().finally(resolve);
    };
    process.on('SIGINT', handler);
    process.on('SIGTERM', handler);
  });
}

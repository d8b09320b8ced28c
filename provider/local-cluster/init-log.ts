// What a simulated host's init (simulated-host.ts, container-node.ts) is run
// with: its logger (JSON lines on stdout, which vkvm up reads and passes on)
// and its start as a program.
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import type { Logger } from '../log.js';

export function initLogger(o: { component: string; node: string; level: string }): Logger {
  // Its log goes to vkvm up; once vkvm up is gone (killed), the stop it still has to do must not die of EPIPE.
  const out = pino.destination({ fd: 1, sync: true });
  out.on('error', () => undefined);
  return pino({ level: o.level, base: { app: 'vkvm' }, timestamp: pino.stdTimeFunctions.isoTime }, out).child({
    component: o.component,
    node: o.node,
  });
}

/** Runs `main` and exits with its code when the module at `moduleUrl` is the program; importing it runs nothing. */
export function runIfProgram(moduleUrl: string, main: () => Promise<number>): void {
  if (moduleUrl !== pathToFileURL(process.argv[1] ?? '').href) return;
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}

// The one root logger. Built once by the CLI and passed down; modules take
// children with { component } and never create their own roots.
import { pino, type Logger } from 'pino';

export type { Logger };

/** `fd`: where the lines go (stdout unless a command keeps stdout for its result). */
export function createRootLogger(level: string = 'info', fd: 1 | 2 = 1): Logger {
  return pino({ level, base: { app: 'vkvm' }, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination(fd));
}

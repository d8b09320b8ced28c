// The one root logger. Built once by the CLI and passed down; modules take
// children with { component } and never create their own roots.
import { pino, type Logger } from 'pino';

export type { Logger };

export function createRootLogger(level: string = 'info'): Logger {
  return pino({ level, base: { app: 'vkvm' }, timestamp: pino.stdTimeFunctions.isoTime });
}

// A Log that records entries, so tests can assert on what was logged.
import type { Log } from '../log.js';

export interface LogEntry {
  level: 'debug' | 'info' | 'warn';
  msg?: string;
  [field: string]: unknown;
}

export function recordingLog(): { log: Log; entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  const at = (level: LogEntry['level']) => (obj: object, msg?: string) => void entries.push({ ...obj, level, msg });
  return { log: { debug: at('debug'), info: at('info'), warn: at('warn') }, entries };
}

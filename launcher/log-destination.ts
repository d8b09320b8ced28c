// Where the launcher's log lines go: its stdout, a file on the node's state
// filesystem. pino's own destination retries a failed write forever once the
// process begins to exit (sonic-boom's flushSync loops on any error but
// EAGAIN), and without a listener its first ENOSPC is an uncaught exception: a
// full disk would hang or kill the launcher, and with it its QEMU. A log line is
// worth less than the VM, so a line that cannot be written is counted and
// dropped, and the next line that can be written says how many went.
import { writeSync } from 'node:fs';

export interface LossyLogDestination {
  write(line: string): void;
  /** Lines dropped since the last successful write. */
  readonly dropped: number;
}

/** `writeText` writes all of its text or throws; the default writes to a descriptor. */
export function lossyLogDestination(writeText: number | ((text: string) => void)): LossyLogDestination {
  const put = typeof writeText === 'number' ? (text: string) => void writeSync(writeText, text) : writeText;
  let dropped = 0;
  const tryWrite = (text: string): boolean => {
    try {
      put(text);
      return true;
    } catch {
      return false;
    }
  };
  return {
    write(line: string): void {
      if (dropped > 0) {
        const note = { level: 40, time: Date.now(), msg: `${dropped} log lines dropped: the log could not be written` };
        if (!tryWrite(`${JSON.stringify(note)}\n`)) {
          dropped += 1;
          return;
        }
        dropped = 0;
      }
      if (!tryWrite(line)) dropped += 1;
    },
    get dropped() {
      return dropped;
    },
  };
}

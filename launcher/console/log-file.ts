// The serial console's log file: what `kubectl logs` shows. Lines are in the
// CRI log format kubelets write for containers,
//   2024-05-01T12:00:00.123Z stdout F <line>
// where P marks a partial line continued by the next record. The serial port
// delivers lines in pieces, so a partial line waits briefly for its end; one
// still open after PARTIAL_FLUSH_MS (a shell prompt) is written as P. The file is
// size-capped: at the cap it moves to <file>.1 (replacing the older segment).
// Each VM start moves the current files to previous.log(.1), which is what
// `kubectl logs --previous` reads.
import { closeSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';

export interface ConsoleLogPaths {
  current: string;
  previous: string;
}

export function consoleLogPaths(dir: string): ConsoleLogPaths {
  return { current: path.join(dir, 'console.log'), previous: path.join(dir, 'console.previous.log') };
}

/** CRI log records for a chunk; `now` is the timestamp of every record in it. */
export function toCriRecords(chunk: Buffer, now: Date): Buffer {
  const ts = now.toISOString();
  const out: Buffer[] = [];
  let start = 0;
  while (start < chunk.length) {
    const nl = chunk.indexOf(0x0a, start);
    const end = nl === -1 ? chunk.length : nl;
    // Serial lines end in CRLF; the CR is terminal noise, not content.
    const contentEnd = nl !== -1 && end > start && chunk[end - 1] === 0x0d ? end - 1 : end;
    out.push(Buffer.from(`${ts} stdout ${nl === -1 ? 'P' : 'F'} `), chunk.subarray(start, contentEnd), Buffer.from('\n'));
    start = end + 1;
  }
  return Buffer.concat(out);
}

/** How long a line without its newline is held back before it is written as a partial record. */
export const PARTIAL_FLUSH_MS = 100;
/** A partial line this long is written at once. */
const MAX_PARTIAL_BYTES = 16 * 1024;

const moveIfExists = (from: string, to: string): void => {
  try {
    renameSync(from, to);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
};

/**
 * Appends with synchronous writes: records stay in order across rotation, and
 * a serial port produces little enough that blocking on it costs nothing.
 */
export class ConsoleLog {
  readonly paths: ConsoleLogPaths;
  private fd: number | undefined;
  private size = 0;
  private partial = Buffer.alloc(0);
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(
    dir: string,
    private readonly maxBytes: number,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.paths = consoleLogPaths(dir);
  }

  /** A new VM run: the last run's log becomes the previous one. */
  startRun(): void {
    this.close();
    for (const suffix of ['', '.1']) {
      rmSync(this.paths.previous + suffix, { force: true });
      moveIfExists(this.paths.current + suffix, this.paths.previous + suffix);
    }
    this.open();
  }

  write(chunk: Buffer): void {
    this.partial = Buffer.concat([this.partial, chunk]);
    const lastNewline = this.partial.lastIndexOf(0x0a);
    if (lastNewline !== -1) {
      this.append(this.partial.subarray(0, lastNewline + 1));
      this.partial = this.partial.subarray(lastNewline + 1);
    }
    if (this.partial.length >= MAX_PARTIAL_BYTES) this.flushPartial();
    else if (this.partial.length > 0) this.flushTimer ??= setTimeout(() => this.flushPartial(), PARTIAL_FLUSH_MS).unref();
  }

  close(): void {
    this.flushPartial();
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private flushPartial(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.partial.length === 0) return;
    this.append(this.partial);
    this.partial = Buffer.alloc(0);
  }

  private append(bytes: Buffer): void {
    if (this.fd === undefined) this.open();
    const records = toCriRecords(bytes, this.now());
    if (this.size > 0 && this.size + records.length > this.maxBytes) {
      closeSync(this.fd!);
      moveIfExists(this.paths.current, `${this.paths.current}.1`);
      this.open();
    }
    writeSync(this.fd!, records);
    this.size += records.length;
  }

  private open(): void {
    this.fd = openSync(this.paths.current, 'a', 0o600);
    this.size = statSync(this.paths.current).size;
  }
}

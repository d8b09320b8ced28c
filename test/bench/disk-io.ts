// disk-io (disk-io.c): building it, and reading the one line each of its jobs prints.
import { join } from 'node:path';
import { packageRoot } from '../../provider/package-root.js';
import { compileFreestanding } from '../helpers/freestanding.js';

export const DISK_IO_MODES = ['seq-write', 'seq-read', 'rand-read', 'rand-write'] as const;
export type DiskIoMode = (typeof DISK_IO_MODES)[number];

export interface DiskIoResult {
  mode: DiskIoMode;
  bytes: number;
  ops: number;
  ns: number;
}

/** Compiles disk-io.c to `out` (a few KiB, static). */
export function buildDiskIo(out: string): Promise<void> {
  return compileFreestanding(join(packageRoot(), 'test', 'bench', 'disk-io.c'), out);
}

/** The result line `MODE bytes=B ops=N ns=T` in `output`; throws quoting the output when there is none or it is not sound. */
export function parseDiskIo(output: string): DiskIoResult {
  const m = /^(seq-write|seq-read|rand-read|rand-write) bytes=(\d+) ops=(\d+) ns=(\d+)$/m.exec(output);
  if (!m) throw new Error(`disk-io printed no result line: ${JSON.stringify(output.slice(0, 300))}`);
  const [bytes, ops, ns] = [Number(m[2]), Number(m[3]), Number(m[4])];
  if (ops === 0 || ns === 0) throw new Error(`disk-io measured nothing: ${m[0]}`);
  return { mode: m[1] as DiskIoMode, bytes, ops, ns };
}

/** MiB/s for the sequential jobs, I/O operations per second for the random ones. */
export function rateOf(r: DiskIoResult): { value: number; unit: 'MiB/s' | 'IOPS' } {
  const seconds = r.ns / 1e9;
  return r.mode.startsWith('seq') ? { value: r.bytes / (1024 * 1024) / seconds, unit: 'MiB/s' } : { value: r.ops / seconds, unit: 'IOPS' };
}

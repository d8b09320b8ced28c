// CRI records to the bytes `kubectl logs` prints, with the kubelet's options.
// A line may span several records (P pieces, then F): it is shown joined, and
// tailLines, sinceTime and the timestamp prefix treat it as one line, dated
// by its first record.
import type { CriRecord } from './cri.js';

export interface RenderOptions {
  /** Prefix each line with its timestamp and a space. */
  timestamps: boolean;
  /** Leave out lines older than this (epoch ms). */
  sinceMs?: number;
  /** Stop after this many output bytes, cutting the last line. */
  limitBytes?: number;
}

/** Index of the first record of the last `lines` lines (a trailing unfinished line counts). */
export function tailStart(records: readonly CriRecord[], lines: number): number {
  if (lines === 0) return records.length;
  let seen = 0;
  for (let i = records.length - 1; i > 0; i--) {
    if (!records[i - 1]!.partial && ++seen === lines) return i;
  }
  return 0;
}

export class LogRenderer {
  private atLineStart = true;
  private showLine = true;
  private remainingBytes: number;

  constructor(private readonly options: RenderOptions) {
    this.remainingBytes = options.limitBytes ?? Infinity;
  }

  /** True once limitBytes has been written: nothing more will be. */
  get done(): boolean {
    return this.remainingBytes <= 0;
  }

  render(records: readonly CriRecord[]): Buffer {
    const out: Buffer[] = [];
    for (const record of records) {
      if (this.done) break;
      if (this.atLineStart) this.showLine = this.options.sinceMs === undefined || record.timeMs >= this.options.sinceMs;
      const prefix = this.atLineStart && this.options.timestamps ? `${record.timestamp} ` : '';
      this.atLineStart = !record.partial;
      if (!this.showLine) continue;
      let bytes = prefix ? Buffer.concat([Buffer.from(prefix), record.content]) : record.content;
      if (bytes.length > this.remainingBytes) bytes = bytes.subarray(0, this.remainingBytes);
      this.remainingBytes -= bytes.length;
      out.push(bytes);
    }
    return Buffer.concat(out);
  }
}

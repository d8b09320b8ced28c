// Records of the CRI log format the launcher writes for the serial console
// (launcher/console/log-file.ts):
//   <RFC3339Nano timestamp> <stdout|stderr> <F|P>[:tags] <content>\n
// F ends a line; P is a piece of a line that the next record continues.
// Parsed the way the kubelet's parseCRILog does it.

export interface CriRecord {
  /** As written, e.g. 2024-05-01T12:00:00.123Z. */
  timestamp: string;
  timeMs: number;
  partial: boolean;
  /** The text, with its "\n" when the record ends a line. */
  content: Buffer;
}

const SPACE = 0x20;
const NEWLINE = 0x0a;

/** One record from one line (without its "\n"); undefined when the line is not a CRI record. */
export function parseCriRecord(line: Buffer): CriRecord | undefined {
  const afterTime = line.indexOf(SPACE);
  const afterStream = line.indexOf(SPACE, afterTime + 1);
  const afterTag = line.indexOf(SPACE, afterStream + 1);
  if (afterTime < 0 || afterStream < 0 || afterTag < 0) return undefined;
  const timestamp = line.toString('latin1', 0, afterTime);
  const timeMs = Date.parse(timestamp);
  const stream = line.toString('latin1', afterTime + 1, afterStream);
  if (Number.isNaN(timeMs) || (stream !== 'stdout' && stream !== 'stderr')) return undefined;
  // Tags are ':'-separated; only the first (F or P) has a meaning so far.
  const partial = line.toString('latin1', afterStream + 1, afterTag).split(':')[0] === 'P';
  const text = line.subarray(afterTag + 1);
  return { timestamp, timeMs, partial, content: partial ? Buffer.from(text) : Buffer.concat([text, Buffer.of(NEWLINE)]) };
}

/**
 * Turns a byte stream into records, holding back a line until its "\n"
 * arrives (a read can end mid-record while the launcher is writing).
 * Lines that are not records are skipped, as the kubelet skips them.
 */
export class CriRecordReader {
  private pending = Buffer.alloc(0);

  push(chunk: Buffer): CriRecord[] {
    const bytes = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    const records: CriRecord[] = [];
    let start = 0;
    for (let nl = bytes.indexOf(NEWLINE); nl !== -1; nl = bytes.indexOf(NEWLINE, start)) {
      const record = parseCriRecord(bytes.subarray(start, nl));
      if (record) records.push(record);
      start = nl + 1;
    }
    this.pending = Buffer.from(bytes.subarray(start));
    return records;
  }

  /** The record held back for want of its "\n", if any: the file is not going to grow. */
  end(): CriRecord[] {
    const record = this.pending.length > 0 ? parseCriRecord(this.pending) : undefined;
    this.pending = Buffer.alloc(0);
    return record ? [record] : [];
  }
}

// A streaming reader of tar archives as image layers hold them (POSIX ustar,
// PAX and GNU long names, base-256 sizes for files over 8 GiB), yielding each
// entry's header and, when the caller wants it, its bytes; a body the caller
// does not read is skipped. Nothing is written to disk here: the caller
// decides what an entry is and where its bytes go.
import { ImageContentError } from './errors.js';

export type TarEntryType = 'file' | 'directory' | 'symlink' | 'hardlink' | 'other';

export interface TarEntry {
  /** Normalised: no leading `./` or `/`, no trailing `/`. */
  path: string;
  type: TarEntryType;
  size: number;
  linkname: string;
}

const BLOCK = 512;

/** Bytes from an async source, buffered just enough to cut headers out of it. */
class ByteReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private readonly it: AsyncIterator<Buffer>;
  private ended = false;

  constructor(source: AsyncIterable<Buffer>) {
    this.it = source[Symbol.asyncIterator]();
  }

  /** Buffers at least `n` bytes; false when the source ends first. */
  private async fill(n: number): Promise<boolean> {
    while (this.buffered < n && !this.ended) {
      const next = await this.it.next();
      if (next.done) this.ended = true;
      else if (next.value.length) {
        this.chunks.push(next.value);
        this.buffered += next.value.length;
      }
    }
    return this.buffered >= n;
  }

  /** Exactly `n` bytes, or undefined at the end of the source. */
  async take(n: number): Promise<Buffer | undefined> {
    if (!(await this.fill(n))) return undefined;
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.buffered = rest.length;
    return out;
  }

  /** The next `n` bytes as they arrive, without gathering them. */
  async *stream(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (!this.buffered && !(await this.fill(1))) throw new ImageContentError('a layer ends inside a file (truncated tar)');
      const head = this.chunks[0]!;
      const piece = head.length <= left ? head : head.subarray(0, left);
      if (piece === head) this.chunks.shift();
      else this.chunks[0] = head.subarray(left);
      this.buffered -= piece.length;
      left -= piece.length;
      yield piece;
    }
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.stream(n));
  }

  /** Stops the source (a decompressor, a file) when reading ends early. */
  async close(): Promise<void> {
    await this.it.return?.();
  }
}

function text(block: Buffer, offset: number, length: number): string {
  const field = block.subarray(offset, offset + length);
  const nul = field.indexOf(0);
  return field.subarray(0, nul < 0 ? length : nul).toString('utf8');
}

/** Octal, or GNU base-256 (high bit set) for values that do not fit 11 octal digits. */
function number(block: Buffer, offset: number, length: number): number {
  const field = block.subarray(offset, offset + length);
  if (field[0]! & 0x80) {
    let n = 0;
    for (let i = 1; i < length; i++) n = n * 256 + field[i]!;
    return n + (field[0]! & 0x7f) * 256 ** (length - 1);
  }
  const s = text(block, offset, length).trim();
  return s ? parseInt(s, 8) : 0;
}

function checksumOk(block: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : block[i]!;
  return number(block, 148, 8) === sum;
}

/** PAX records: "<length> <key>=<value>\n". */
function paxRecords(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let pos = 0;
  while (pos < data.length) {
    const space = data.indexOf(0x20, pos);
    const len = parseInt(data.subarray(pos, space).toString('ascii'), 10);
    if (space < 0 || !Number.isSafeInteger(len) || len <= 0) break;
    const record = data.subarray(space + 1, pos + len - 1).toString('utf8');
    const eq = record.indexOf('=');
    if (eq > 0) out[record.slice(0, eq)] = record.slice(eq + 1);
    pos += len;
  }
  return out;
}

export function normalisePath(p: string): string {
  return p.replace(/^(\.?\/)+/, '').replace(/\/+$/, '');
}

const TYPES: Record<string, TarEntryType> = {
  '0': 'file',
  '\0': 'file',
  '': 'file',
  '7': 'file',
  '5': 'directory',
  '2': 'symlink',
  '1': 'hardlink',
};

/**
 * Reads `source` entry by entry. Each yielded entry's `body` may be read,
 * in whole or in part, before the next entry is asked for, or ignored.
 */
export async function* readTar(source: AsyncIterable<Buffer>): AsyncGenerator<{ entry: TarEntry; body: () => AsyncGenerator<Buffer> }> {
  const r = new ByteReader(source);
  try {
    let longName: string | undefined;
    let longLink: string | undefined;
    let pax: Record<string, string> = {};
    while (true) {
      const block = await r.take(BLOCK);
      // The end: a zero block (two, by the standard; some writers stop after one or at none).
      if (!block || block.every((b) => b === 0)) return;
      if (!checksumOk(block)) throw new ImageContentError('a layer is not a tar archive (bad header checksum)');
      const flag = String.fromCharCode(block[156]!);
      const size = pax.size !== undefined ? Number(pax.size) : number(block, 124, 12);
      if (!Number.isSafeInteger(size) || size < 0) throw new ImageContentError('a tar entry has an invalid size');
      const padded = Math.ceil(size / BLOCK) * BLOCK;
      if (flag === 'x' || flag === 'g' || flag === 'L' || flag === 'K') {
        const data = await r.take(padded);
        if (!data) throw new ImageContentError('a layer ends inside a tar header');
        const content = data.subarray(0, size);
        // Global PAX headers set defaults no layer writer uses for paths; they are read past.
        if (flag === 'x') pax = { ...pax, ...paxRecords(content) };
        if (flag === 'L') longName = text(content, 0, content.length);
        if (flag === 'K') longLink = text(content, 0, content.length);
        continue;
      }
      const ustar = block.subarray(257, 263).toString('latin1') === 'ustar\0';
      const prefix = ustar ? text(block, 345, 155) : '';
      const name = pax.path ?? longName ?? (prefix ? `${prefix}/${text(block, 0, 100)}` : text(block, 0, 100));
      const entry: TarEntry = {
        path: normalisePath(name),
        type: TYPES[flag] ?? 'other',
        size: flag === '5' || flag === '2' || flag === '1' ? 0 : size,
        linkname: pax.linkpath ?? longLink ?? text(block, 157, 100),
      };
      pax = {};
      longName = undefined;
      longLink = undefined;
      let consumed = 0;
      yield {
        entry,
        body: async function* () {
          for await (const piece of r.stream(size - consumed)) {
            consumed += piece.length;
            yield piece;
          }
        },
      };
      // What the caller did not read (or read only in part) is skipped, then the padding.
      await r.skip(padded - consumed);
    }
  } finally {
    await r.close();
  }
}

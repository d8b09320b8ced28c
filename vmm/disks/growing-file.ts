// A file being downloaded, read while it lands: a read waits until the
// download has written every byte it asks for, and fails if the download
// fails first. Never does a reader see a hole or a short file as data, so a
// qemu-img reading it through nbd-export.ts converts exactly the bytes a
// finished download would hold.
import type { FileHandle } from 'node:fs/promises';

interface Waiter {
  end: number;
  resolve: () => void;
  reject: (err: Error) => void;
}

export class GrowingFile {
  private landed = 0;
  private failure: Error | undefined;
  private waiters: Waiter[] = [];

  /** `size`: what the download will hold, as its server said. */
  constructor(
    private readonly file: FileHandle,
    readonly size: number,
  ) {}

  /** The download's first `bytes` bytes are in the file. */
  landedUpTo(bytes: number): void {
    this.landed = Math.max(this.landed, bytes);
    this.waiters = this.waiters.filter((w) => (w.end <= this.landed ? (w.resolve(), false) : true));
  }

  /** The download ended (failed, stopped, or done): a read of bytes that have not landed, waiting or to come, fails with `err`. */
  fail(err: Error): void {
    this.failure ??= err;
    for (const w of this.waiters) w.reject(this.failure);
    this.waiters = [];
  }

  /** Fills `into` from `offset` once those bytes have landed. */
  async read(into: Buffer, offset: number): Promise<void> {
    const end = offset + into.length;
    if (offset < 0 || end > this.size) throw new RangeError(`read of ${into.length} bytes at ${offset} is past the end (${this.size})`);
    await this.landedTo(end);
    for (let at = 0; at < into.length;) {
      const { bytesRead } = await this.file.read(into, at, into.length - at, offset + at);
      if (bytesRead === 0) throw new Error(`the file ends before ${end} bytes, though they landed`);
      at += bytesRead;
    }
  }

  private landedTo(end: number): Promise<void> {
    if (end <= this.landed) return Promise.resolve();
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => this.waiters.push({ end, resolve, reject }));
  }
}

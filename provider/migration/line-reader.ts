// Reads one newline-terminated line off a byte stream and leaves the rest of
// the stream unread, so a relay stream can be piped onwards right after its
// header. Bounded: a peer cannot make the reader buffer more than maxBytes.
import type { Readable } from 'node:stream';
import { FrameError } from './frames.js';

/** The line without its newline. Rejects with a FrameError naming `field` when it is too long or the stream ends first. */
export function readLine(stream: Readable, maxBytes: number, field: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = (): void => {
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('close', onEnd);
      stream.off('error', onError);
    };
    const fail = (err: Error): void => {
      cleanup();
      reject(err);
    };
    function onReadable(): void {
      for (let chunk: Buffer | null; (chunk = stream.read() as Buffer | null) !== null;) {
        const newline = chunk.indexOf(0x0a);
        const used = newline < 0 ? chunk.length : newline;
        if (size + used > maxBytes) return fail(new FrameError(field, `is longer than ${maxBytes} bytes`));
        if (newline < 0) {
          chunks.push(chunk);
          size += chunk.length;
          continue;
        }
        cleanup();
        const rest = chunk.subarray(newline + 1);
        if (rest.length > 0) stream.unshift(rest);
        return resolve(Buffer.concat([...chunks, chunk.subarray(0, newline)]));
      }
    }
    function onEnd(): void {
      fail(new FrameError(field, 'the stream ended before the line did'));
    }
    function onError(err: Error): void {
      fail(err);
    }
    stream.on('readable', onReadable);
    stream.once('end', onEnd);
    stream.once('close', onEnd);
    stream.once('error', onError);
  });
}

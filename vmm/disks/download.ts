// Streams an http(s) URL into a file, logging progress every ~10% when the
// server says how big the image is.
import { createWriteStream } from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream } from 'node:stream/web';
import { DownloadError } from '../errors.js';
import type { Log } from '../log.js';

/** URLs may carry tokens in the user-info or query; only origin and path reach logs and errors. */
export function redactUrl(url: string): string {
  const { origin, pathname } = new URL(url);
  return origin + pathname;
}

/** Downloads `url` into `dest` (which must not exist) and returns the byte count. */
export async function downloadToFile(url: string, dest: string, log: Log): Promise<number> {
  const shownUrl = redactUrl(url);
  let res: Response;
  try {
    res = await fetch(url);
  } catch (err) {
    throw new DownloadError(shownUrl, (err as Error).message, undefined, { cause: err });
  }
  if (!res.ok || !res.body) {
    await res.body?.cancel();
    throw new DownloadError(shownUrl, `server answered ${res.status} ${res.statusText}`, res.status);
  }
  // With a content encoding, Content-Length counts compressed bytes, not the bytes written.
  const totalBytes = res.headers.has('content-encoding') ? undefined : Number(res.headers.get('content-length')) || undefined;
  let receivedBytes = 0;
  let nextPercent = 10;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      receivedBytes += chunk.length;
      const percent = totalBytes ? Math.floor((receivedBytes * 100) / totalBytes) : 0;
      if (totalBytes && percent >= nextPercent) {
        log.info({ url: shownUrl, receivedBytes, totalBytes, percent }, 'downloading image');
        nextPercent = percent - (percent % 10) + 10;
      }
      done(null, chunk);
    },
  });
  log.info({ url: shownUrl, totalBytes }, 'image download started');
  try {
    await pipeline(Readable.fromWeb(res.body as ReadableStream<Uint8Array>), meter, createWriteStream(dest, { flags: 'wx' }));
  } catch (err) {
    throw new DownloadError(shownUrl, (err as Error).message, undefined, { cause: err });
  }
  if (totalBytes !== undefined && receivedBytes !== totalBytes) {
    throw new DownloadError(shownUrl, `received ${receivedBytes} of ${totalBytes} bytes`);
  }
  return receivedBytes;
}

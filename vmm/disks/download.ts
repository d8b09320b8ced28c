// Streams an http(s) URL into a file under the node's download policy
// (download-policy.ts): every hop's address checked, redirects followed by
// hand so each is checked, a size cap, an overall and an idle time limit.
// Progress is logged every ~10% when the server says how big the image is.
// node:http rather than fetch: fetch takes no `lookup`, so the address it
// connects to could not be the one that was checked.
import { createWriteStream } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { DownloadError } from '../errors.js';
import type { Log } from '../log.js';
import { AddressRefusedError, guardedLookup, refusalOf, type DownloadPolicy } from './download-policy.js';

const MAX_REDIRECTS = 5;
/** Socket chunks (64 KiB) queue up to this while a write is under way and go out in one writev: fewer thread-pool round trips. */
const WRITE_BUFFER_BYTES = 4 * 2 ** 20;

/** URLs may carry tokens in the user-info or query; only origin and path reach logs and errors. */
export function redactUrl(url: string): string {
  const { origin, pathname } = new URL(url);
  return origin + pathname;
}

/** One GET; the response, or a redirect's next URL. */
function get(url: URL, policy: DownloadPolicy, signal: AbortSignal): Promise<IncomingMessage> {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  // A literal address is never looked up, so it is checked here.
  const refused = isIP(host) ? refusalOf(host, policy) : undefined;
  if (refused) return Promise.reject(new AddressRefusedError(refused));
  const request = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    const req = request(url, { lookup: guardedLookup(policy), signal, headers: { 'user-agent': 'vkvm' } }, resolve);
    req.on('error', reject);
    req.end();
  });
}

async function follow(url: string, policy: DownloadPolicy, signal: AbortSignal): Promise<IncomingMessage> {
  let current = new URL(url);
  for (let hop = 0; ; hop++) {
    if (current.protocol !== 'http:' && current.protocol !== 'https:')
      throw new DownloadError(redactUrl(url), `redirected to a ${current.protocol} URL`);
    const res = await get(current, policy, signal);
    const location = res.headers.location;
    if (!location || ![301, 302, 303, 307, 308].includes(res.statusCode ?? 0)) return res;
    res.resume();
    if (hop >= MAX_REDIRECTS) throw new DownloadError(redactUrl(url), `more than ${MAX_REDIRECTS} redirects`);
    current = new URL(location, current);
  }
}

/** Called as bytes arrive; `totalBytes` when the server said. It must be cheap: it runs once per chunk, inside the copy. */
export type DownloadProgress = (receivedBytes: number, totalBytes: number | undefined) => void;

/** Downloads `url` into `dest` (which must not exist) and returns the byte count; `cancel` stops it (nobody wants it any more). */
export async function downloadToFile(
  url: string,
  dest: string,
  policy: DownloadPolicy,
  log: Log,
  cancel?: AbortSignal,
  onProgress?: DownloadProgress,
): Promise<number> {
  const shownUrl = redactUrl(url);
  const capMiB = Math.floor(policy.maxBytes / 2 ** 20);
  const idle = new AbortController();
  let idleTimer = setTimeout(() => idle.abort(), policy.idleTimeoutMs);
  const signal = AbortSignal.any([AbortSignal.timeout(policy.timeoutMs), idle.signal, ...(cancel ? [cancel] : [])]);
  const fail = (err: unknown): never => {
    if (err instanceof DownloadError) throw err;
    if (err instanceof AddressRefusedError) {
      throw new DownloadError(shownUrl, `refused: ${err.message}; images may not come from the node or its local services`, undefined, {
        cause: err,
        permanent: 'FieldValueForbidden',
      });
    }
    const why = cancel?.aborted
      ? 'cancelled: no pod wants it any more'
      : idle.signal.aborted
        ? `no data for ${policy.idleTimeoutMs / 1000} s`
        : signal.aborted
          ? `not done within ${policy.timeoutMs / 1000} s`
          : (err as Error).message;
    throw new DownloadError(shownUrl, why, undefined, { cause: err });
  };
  try {
    const res = await follow(url, policy, signal).catch(fail);
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      res.resume();
      throw new DownloadError(shownUrl, `server answered ${status} ${res.statusMessage ?? ''}`.trim(), status);
    }
    // With a content encoding, Content-Length counts compressed bytes, not the bytes written.
    const totalBytes = res.headers['content-encoding'] ? undefined : Number(res.headers['content-length']) || undefined;
    const tooLarge = () =>
      new DownloadError(shownUrl, `the image is larger than this node's ${capMiB} MiB cap`, undefined, { permanent: 'FieldValueInvalid' });
    if (totalBytes !== undefined && totalBytes > policy.maxBytes) {
      res.destroy();
      throw tooLarge();
    }
    let receivedBytes = 0;
    let nextPercent = 10;
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        receivedBytes += chunk.length;
        if (receivedBytes > policy.maxBytes) return done(tooLarge());
        clearTimeout(idleTimer);
        idleTimer = setTimeout(() => idle.abort(), policy.idleTimeoutMs);
        onProgress?.(receivedBytes, totalBytes);
        const percent = totalBytes ? Math.floor((receivedBytes * 100) / totalBytes) : 0;
        if (totalBytes && percent >= nextPercent) {
          log.info({ url: shownUrl, receivedBytes, totalBytes, percent }, 'downloading image');
          nextPercent = percent - (percent % 10) + 10;
        }
        done(null, chunk);
      },
    });
    log.info({ url: shownUrl, totalBytes }, 'image download started');
    await pipeline(res, meter, createWriteStream(dest, { flags: 'wx', highWaterMark: WRITE_BUFFER_BYTES }), { signal }).catch(fail);
    if (totalBytes !== undefined && receivedBytes !== totalBytes) {
      throw new DownloadError(shownUrl, `received ${receivedBytes} of ${totalBytes} bytes`);
    }
    return receivedBytes;
  } finally {
    clearTimeout(idleTimer);
  }
}

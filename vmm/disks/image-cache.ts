// Downloaded images live in a cache shared by all VMs on the node, named by
// the sha256 of their URL: a URL is fetched once and then used as a read-only
// base under per-VM overlays. A changed image therefore needs a new URL.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rename, rm, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { Log } from '../log.js';
import { downloadToFile, redactUrl } from './download.js';
import type { DownloadPolicy } from './download-policy.js';
import { statIfExists } from './fs.js';

/**
 * Downloads in flight in this process, by cache path, so concurrent requests
 * for one URL share a download, with how many callers still want it: when the
 * last one gives up (its pod deleted), the download is aborted. Separate
 * processes may still race; each writes its own temp file and the atomic
 * rename makes the last identical copy win.
 */
interface Inflight {
  done: Promise<string>;
  wanted: number;
  cancel: AbortController;
}
const inflight = new Map<string, Inflight>();

export function imageCachePath(cacheDir: string, url: string): string {
  return join(cacheDir, `${createHash('sha256').update(url).digest('hex')}.img`);
}

/** The cache paths of downloads under way in this process (never collected). */
export function downloadsInFlight(): ReadonlySet<string> {
  return new Set(inflight.keys());
}

/** The cached copy of `url`, downloaded first if missing; `signal` withdraws this caller's interest. */
export function cachedImage(url: string, cacheDir: string, policy: DownloadPolicy, log: Log, signal?: AbortSignal): Promise<string> {
  const path = imageCachePath(cacheDir, url);
  let shared = inflight.get(path);
  // One aborted (its last caller gone) but not yet unwound is no use to a new caller: it starts afresh.
  if (!shared || shared.cancel.signal.aborted) {
    const cancel = new AbortController();
    const done: Promise<string> = fetchIntoCache(url, path, cacheDir, policy, log, cancel.signal).finally(() => {
      if (inflight.get(path)?.done === done) inflight.delete(path);
    });
    shared = { done, wanted: 0, cancel };
    inflight.set(path, shared);
  }
  const joined = shared;
  joined.wanted++;
  if (!signal) return joined.done;
  if (signal.aborted) return withdraw(joined, signal);
  return new Promise<string>((resolve, reject) => {
    const onAbort = () => withdraw(joined, signal).catch(reject);
    signal.addEventListener('abort', onAbort, { once: true });
    joined.done.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

function withdraw(entry: Inflight, signal: AbortSignal): Promise<never> {
  if (--entry.wanted === 0) entry.cancel.abort(signal.reason);
  return Promise.reject(signal.reason instanceof Error ? signal.reason : new Error('no longer wanted'));
}

async function fetchIntoCache(
  url: string,
  path: string,
  cacheDir: string,
  policy: DownloadPolicy,
  log: Log,
  cancel: AbortSignal,
): Promise<string> {
  if (await statIfExists(path)) {
    // The mtime is the entry's last use, for the cache's garbage collection (image-cache-gc.ts).
    const now = new Date();
    await utimes(path, now, now).catch(() => undefined);
    log.debug({ url: redactUrl(url), path }, 'image cache hit');
    return path;
  }
  await mkdir(cacheDir, { recursive: true });
  // Written under a temporary name and renamed, so a cache path always holds a complete image.
  const partial = `${path}.${process.pid}-${randomBytes(4).toString('hex')}.part`;
  try {
    const bytes = await downloadToFile(url, partial, policy, log, cancel);
    await rename(partial, path);
    log.info({ url: redactUrl(url), path, bytes }, 'image cached');
    return path;
  } catch (err) {
    await rm(partial, { force: true });
    throw err;
  }
}

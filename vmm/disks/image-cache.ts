// Downloaded images live in a cache shared by all VMs on the node, named by
// the sha256 of their URL: a URL is fetched once and then used as a read-only
// base under per-VM overlays. A changed image therefore needs a new URL.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Log } from '../log.js';
import { downloadToFile, redactUrl } from './download.js';
import type { DownloadPolicy } from './download-policy.js';
import { statIfExists } from './fs.js';

/**
 * Downloads in flight in this process, by cache path, so concurrent requests
 * for one URL share a download. Separate processes may still race; each writes
 * its own temp file and the atomic rename makes the last identical copy win.
 */
const inflight = new Map<string, Promise<string>>();

export function imageCachePath(cacheDir: string, url: string): string {
  return join(cacheDir, `${createHash('sha256').update(url).digest('hex')}.img`);
}

/** The cached copy of `url`, downloaded first if missing. */
export function cachedImage(url: string, cacheDir: string, policy: DownloadPolicy, log: Log): Promise<string> {
  const path = imageCachePath(cacheDir, url);
  let pending = inflight.get(path);
  if (!pending) {
    pending = fetchIntoCache(url, path, cacheDir, policy, log).finally(() => inflight.delete(path));
    inflight.set(path, pending);
  }
  return pending;
}

async function fetchIntoCache(url: string, path: string, cacheDir: string, policy: DownloadPolicy, log: Log): Promise<string> {
  if (await statIfExists(path)) {
    log.debug({ url: redactUrl(url), path }, 'image cache hit');
    return path;
  }
  await mkdir(cacheDir, { recursive: true });
  // Written under a temporary name and renamed, so a cache path always holds a complete image.
  const partial = `${path}.${process.pid}-${randomBytes(4).toString('hex')}.part`;
  try {
    const bytes = await downloadToFile(url, partial, policy, log);
    await rename(partial, path);
    log.info({ url: redactUrl(url), path, bytes }, 'image cached');
    return path;
  } catch (err) {
    await rm(partial, { force: true });
    throw err;
  }
}

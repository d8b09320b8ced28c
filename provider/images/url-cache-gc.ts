// Garbage collection of the URL image cache (vmm/disks/image-cache.ts), on the
// image store's policy and plan (image-gc.ts): when the filesystem holding the
// cache is past the high threshold, entries go least recently used first until
// it would be at the low one. An entry is pinned while a pod on this node (not
// yet gone, VM and all) names its URL, or while it is being downloaded; one
// used or downloaded less than the minimum age ago stays too. An entry's mtime
// is its last use: cache hits and each pass over pinned entries touch it.
// Partial downloads of processes gone (an agent or launcher killed mid-way) are
// cleared first. A running VM whose entry were removed anyway would keep its
// open file; a restart downloads the image again before its launcher starts.
// An operator's byte quota (--image-cache-quota-mib) collects the same way
// once the cache holds more, down to its low mark; when what is pinned or too
// new still passes it, a new URL is refused (tenants choose URLs, and each
// download holds disk the filesystem shares with etcd and VM disks).
import { readdir, rm, stat, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../log.js';
import type { AgentMetrics } from '../metrics.js';
import type { VmSpec } from '../../vmm/spec.js';
import { downloadsInFlight, imageCachePath } from '../../vmm/disks/image-cache.js';
import { ImagePullError } from './errors.js';
import { GcLoop } from './gc-loop.js';
import { planImageGc, quotaExcessBytes, reportPass, statfsUsage, type FsUsage, type GcResult, type ImageGcPolicy } from './image-gc.js';

const ENTRY = /^[0-9a-f]{64}\.img$/;
const PARTIAL = /^[0-9a-f]{64}\.img\.(\d+)-[0-9a-f]+\.part$/;
const mib = (bytes: number) => Math.ceil(bytes / 2 ** 20);

/** Bytes a file holds on disk; 0 once gone. */
async function diskBytes(path: string): Promise<number> {
  return ((await stat(path).catch(() => undefined))?.blocks ?? 0) * 512;
}

/** The URLs each pod's VM uses, as its last synced spec named them (VmRuntime notes them). */
export class UrlImagesInUse {
  private readonly byUid = new Map<string, string[]>();

  note(uid: string, spec: VmSpec): void {
    this.byUid.set(
      uid,
      spec.disks.flatMap((d) => (d.source.kind === 'url' ? [d.source.url] : [])),
    );
  }

  /** The cache paths pods still on the node use; pods gone are dropped. */
  cachePaths(cacheDir: string, alive: (uid: string) => boolean): Set<string> {
    const paths = new Set<string>();
    for (const [uid, urls] of this.byUid) {
      if (!alive(uid)) this.byUid.delete(uid);
      else for (const url of urls) paths.add(imageCachePath(cacheDir, url));
    }
    return paths;
  }
}

export interface UrlCacheGcOptions {
  dir: string;
  /** The cache paths pinned by pods on this node. */
  inUse: () => ReadonlySet<string>;
  policy: ImageGcPolicy;
  /** --image-cache-quota-mib in bytes; 0: only the filesystem rule. */
  quotaBytes?: number;
  periodMs: number;
  fsUsage?: (path: string) => Promise<FsUsage>;
  /** Whether a process runs; kill(pid, 0) by default. */
  processAlive?: (pid: number) => boolean;
  metrics: Pick<
    AgentMetrics,
    | 'imageCacheBytes'
    | 'imageCacheEntries'
    | 'imageCacheGcRuns'
    | 'imageCacheGarbageCollected'
    | 'imageCacheGcFreedBytes'
    | 'imageQuotaExcessBytes'
    | 'imageCacheQuotaRefusals'
  >;
  log: Logger;
  now?: () => number;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

interface Entry {
  path: string;
  bytes: number;
  lastUsedMs: number;
}

/** Kicked after every download: a download is what fills the cache. */
export class UrlCacheGc extends GcLoop {
  private readonly now: () => number;

  constructor(private readonly o: UrlCacheGcOptions) {
    // The first pass waits a period: pins are noted as pods sync, after an agent restart too.
    super({ periodMs: o.periodMs, passAtStart: false, runs: o.metrics.imageCacheGcRuns, log: o.log, what: 'image cache' });
    this.now = o.now ?? Date.now;
  }

  /**
   * Lets a download of `url` (named by the spec at `at`) begin unless the cache
   * is over its quota even after a pass: then ErrImagePull naming the flag, and
   * the pod backs off until pins go. A cached or in-flight URL adds nothing.
   */
  async admit(url: string, at: string): Promise<void> {
    const quotaBytes = this.o.quotaBytes ?? 0;
    const path = imageCachePath(this.o.dir, url);
    if (quotaBytes === 0 || downloadsInFlight().has(path) || (await stat(path).catch(() => undefined))) return;
    if ((await this.heldBytes()) < quotaBytes) return;
    await this.settle();
    const heldBytes = await this.heldBytes();
    if (heldBytes < quotaBytes) return;
    this.o.metrics.imageCacheQuotaRefusals.inc();
    this.o.log.warn({ field: at, heldBytes, quotaBytes }, 'image download refused: the image cache is full of images in use or too new');
    throw new ImagePullError(
      'ErrImagePull',
      `${at}: the node's image cache holds ${mib(heldBytes)} MiB of images in use or downloaded recently, its quota (--image-cache-quota-mib) is ${mib(quotaBytes)} MiB; retried as pods using them go`,
    );
  }

  /** Entries and downloads under way: what the cache holds on disk. */
  private async heldBytes(): Promise<number> {
    const names = await readdir(this.o.dir).catch(() => [] as string[]);
    let sum = 0;
    for (const name of names) if (ENTRY.test(name) || PARTIAL.test(name)) sum += await diskBytes(join(this.o.dir, name));
    return sum;
  }

  async runOnce(): Promise<GcResult> {
    const { dir, log, metrics } = this.o;
    const alive = this.o.processAlive ?? processAlive;
    const names = await readdir(dir).catch(() => [] as string[]);
    let partialBytes = 0;
    for (const name of names) {
      const pid = PARTIAL.exec(name)?.[1];
      if (pid === undefined || alive(Number(pid))) continue;
      partialBytes += (await stat(join(dir, name)).catch(() => undefined))?.size ?? 0;
      await rm(join(dir, name), { force: true });
      log.info({ file: name, pid: Number(pid) }, 'partial image download of a process gone removed');
    }
    const pinned = new Set([...this.o.inUse(), ...downloadsInFlight()]);
    const at = new Date(this.now());
    const entries: Entry[] = [];
    for (const name of names.filter((n) => ENTRY.test(n))) {
      const path = join(dir, name);
      // In use now: that is its last use.
      if (pinned.has(path)) await utimes(path, at, at).catch(() => undefined);
      const s = await stat(path).catch(() => undefined);
      if (s) entries.push({ path, bytes: s.blocks * 512, lastUsedMs: s.mtimeMs });
    }
    const usage = await (this.o.fsUsage ?? statfsUsage)(dir);
    // Downloads under way hold disk too, though none of it can be freed.
    let liveBytes = 0;
    for (const name of names.filter((n) => PARTIAL.test(n))) liveBytes += await diskBytes(join(dir, name));
    const quotaBytes = this.o.quotaBytes ?? 0;
    const plan = planImageGc({
      images: entries.map((e) => ({
        id: e.path,
        names: [],
        parts: new Map([[e.path, e.bytes]]),
        pulledAtMs: e.lastUsedMs,
        lastUsedMs: e.lastUsedMs,
      })),
      pinned,
      usage,
      policy: this.o.policy,
      nowMs: this.now(),
      quota: { quotaBytes, heldBytes: entries.reduce((sum, e) => sum + e.bytes, liveBytes) },
    });
    const gone = new Set<string>();
    let freedBytes = partialBytes;
    for (const { id, freesBytes } of plan.remove) {
      // A pod that came to want it since the plan keeps it.
      if (this.o.inUse().has(id) || downloadsInFlight().has(id)) continue;
      await rm(id, { force: true });
      gone.add(id);
      freedBytes += freesBytes;
      log.info({ path: id }, 'downloaded image garbage-collected');
    }
    const removed = gone.size;
    metrics.imageCacheGarbageCollected.inc(removed);
    metrics.imageCacheGcFreedBytes.inc(freedBytes);
    const left = entries.filter((e) => !gone.has(e.path));
    metrics.imageCacheEntries.set(left.length);
    const heldBytes = left.reduce((sum, e) => sum + e.bytes, 0);
    metrics.imageCacheBytes.set(heldBytes);
    const excessBytes = quotaExcessBytes({ quotaBytes, heldBytes: heldBytes + liveBytes });
    metrics.imageQuotaExcessBytes.set({ cache: 'url-cache' }, excessBytes);
    if (excessBytes > 0)
      log.warn(
        { heldBytes, liveBytes, quotaBytes, excessBytes },
        'image cache over --image-cache-quota-mib: the rest is in use or too new',
      );
    if (plan.needBytes === 0) return 'below-threshold';
    return reportPass(plan, { removed, freedBytes }, log, 'image cache');
  }
}

// Garbage collection of the image store, as the kubelet's image GC manager
// collects a runtime's images: when the filesystem holding the store is
// `highThresholdPercent` full, images are removed least recently used first
// until it would be `lowThresholdPercent` full; an image pinned by a pod on
// this node (pins.ts), or pulled less than `minAgeMs` ago, is never removed.
// Parts shared between images (layers, taken-out files) count as freed only
// with the last image holding them. Runs every `periodMs` and after every
// pull (a pull is what fills the disk); each run first releases the pins of
// pods gone from the node and clears partial downloads of processes gone.
import { statfs } from 'node:fs/promises';
import type { Counter, Gauge } from 'prom-client';
import type { Logger } from '../log.js';
import { GcLoop } from './gc-loop.js';
import { readInventory, type StoredImage } from './inventory.js';
import { pinnedImages, type PinStore } from './pins.js';
import { pruneStore, removeImage } from './remove.js';
import type { ImageStore } from './store.js';

export interface ImageGcPolicy {
  highThresholdPercent: number;
  lowThresholdPercent: number;
  minAgeMs: number;
}

/** The kubelet's defaults: imageGCHighThresholdPercent, imageGCLowThresholdPercent, imageMinimumGCAge. */
export const DEFAULT_IMAGE_GC_POLICY: ImageGcPolicy = { highThresholdPercent: 85, lowThresholdPercent: 80, minAgeMs: 2 * 60_000 };

/** The kubelet's ImageGCPeriod. */
export const DEFAULT_IMAGE_GC_PERIOD_MS = 5 * 60_000;

export interface FsUsage {
  capacityBytes: number;
  availableBytes: number;
}

export interface GcPlan {
  usagePercent: number;
  /** What must go to get down to the low threshold; 0 below the high one. */
  needBytes: number;
  remove: Array<{ id: string; freesBytes: number }>;
  freesBytes: number;
}

/** The kubelet's arithmetic: usage = 100 - available·100/capacity, in whole percent. */
export function usagePercent(u: FsUsage): number {
  return u.capacityBytes > 0 ? 100 - Math.floor((u.availableBytes * 100) / u.capacityBytes) : 0;
}

/** What to remove, in order: least recently used first, pinned and young images left. Pure. */
export function planImageGc(o: {
  images: readonly StoredImage[];
  pinned: ReadonlySet<string>;
  usage: FsUsage;
  policy: ImageGcPolicy;
  nowMs: number;
}): GcPlan {
  const percent = usagePercent(o.usage);
  const needBytes =
    percent >= o.policy.highThresholdPercent
      ? Math.max(0, Math.ceil((o.usage.capacityBytes * (100 - o.policy.lowThresholdPercent)) / 100 - o.usage.availableBytes))
      : 0;
  const plan: GcPlan = { usagePercent: percent, needBytes, remove: [], freesBytes: 0 };
  if (needBytes === 0) return plan;
  // How many images hold each part: a part is freed when its last holder goes.
  const holders = new Map<string, number>();
  for (const image of o.images) for (const part of image.parts.keys()) holders.set(part, (holders.get(part) ?? 0) + 1);
  const candidates = o.images
    .filter((i) => !o.pinned.has(i.id) && o.nowMs - i.pulledAtMs >= o.policy.minAgeMs)
    .sort((a, b) => a.lastUsedMs - b.lastUsedMs || a.pulledAtMs - b.pulledAtMs || a.id.localeCompare(b.id));
  for (const image of candidates) {
    if (plan.freesBytes >= needBytes) break;
    let frees = 0;
    for (const [part, bytes] of image.parts) {
      const left = holders.get(part)! - 1;
      holders.set(part, left);
      if (left === 0) frees += bytes;
    }
    plan.remove.push({ id: image.id, freesBytes: frees });
    plan.freesBytes += frees;
  }
  return plan;
}

export interface ImageGcMetrics {
  imageStoreBytes: Gauge;
  imageStoreImages: Gauge;
  imageFsUsageRatio: Gauge;
  imageGcRuns: Counter<'result'>;
  imagesGarbageCollected: Counter;
  imageGcFreedBytes: Counter;
}

export interface ImageGcOptions {
  store: ImageStore;
  pins: PinStore;
  /** Whether a pod UID is still on this node: in the pod cache, or its VM's launcher still there. */
  alive: (uid: string) => boolean;
  /** Blobs of pulls under way in this process: never pruned, whatever their age. */
  inUse: () => ReadonlySet<string>;
  policy: ImageGcPolicy;
  periodMs: number;
  /** The filesystem holding `path`; statfs by default. */
  fsUsage?: (path: string) => Promise<FsUsage>;
  metrics: ImageGcMetrics;
  log: Logger;
  now?: () => number;
}

export type GcResult = 'below-threshold' | 'freed' | 'insufficient';

export async function statfsUsage(path: string): Promise<FsUsage> {
  const s = await statfs(path);
  return { capacityBytes: s.blocks * s.bsize, availableBytes: s.bavail * s.bsize };
}

export class ImageGc {
  private readonly loop: GcLoop;
  private readonly now: () => number;
  private readonly fsUsage: (path: string) => Promise<FsUsage>;

  constructor(private readonly o: ImageGcOptions) {
    this.now = o.now ?? Date.now;
    this.fsUsage = o.fsUsage ?? statfsUsage;
    this.loop = new GcLoop({ periodMs: o.periodMs, pass: () => this.runOnce(), runs: o.metrics.imageGcRuns, log: o.log, what: 'image' });
  }

  start(): void {
    this.loop.start();
  }

  /** Runs a pass now, or once more after the one under way; never two at once. */
  kick(): void {
    this.loop.kick();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /** One pass: release the pins of pods gone, then collect if the filesystem is past its high threshold. */
  async runOnce(): Promise<GcResult> {
    const { store, pins, log } = this.o;
    await store.clearIngest();
    for (const pin of await pins.list()) {
      if (this.o.alive(pin.uid)) continue;
      // Its pod is gone: its images were last used now.
      const at = this.now();
      for (const id of pinnedImages([pin], await store.records()).keys()) await store.updateImage(id, (r) => ({ ...r, lastUsedMs: at }));
      await pins.unpin(pin.uid);
      log.debug({ pod: pin.pod, uid: pin.uid }, 'image pins released');
    }
    const inventory = await readInventory(store);
    const usage = await this.fsUsage(store.root);
    this.record(inventory.storeBytes, inventory.images.length, usage);
    const plan = planImageGc({
      images: inventory.images,
      pinned: new Set(pinnedImages(await pins.list(), await store.records()).keys()),
      usage,
      policy: this.o.policy,
      nowMs: this.now(),
    });
    if (plan.needBytes === 0) return 'below-threshold';
    let removed = 0;
    for (const { id } of plan.remove) {
      // Pins are read again under the lock: a pod that started using the image since the plan keeps it.
      const gone = await pins.withLock(async () => {
        if (pinnedImages(await pins.list(), await store.records()).has(id)) return false;
        return (await removeImage(store, id)).length > 0;
      });
      if (!gone) continue;
      removed++;
      log.info({ image: id }, 'image garbage-collected');
    }
    const pruned = await pruneStore(store, { minAgeMs: this.o.policy.minAgeMs, now: this.now(), inUse: this.o.inUse() });
    const after = await this.fsUsage(store.root);
    const freedBytes = Math.max(0, after.availableBytes - usage.availableBytes);
    this.o.metrics.imagesGarbageCollected.inc(removed);
    this.o.metrics.imageGcFreedBytes.inc(freedBytes);
    this.record((await readInventory(store)).storeBytes, inventory.images.length - removed, after);
    const enough = plan.freesBytes >= plan.needBytes;
    const summary = { usagePercent: plan.usagePercent, needBytes: plan.needBytes, removed, prunedBlobs: pruned.blobs, freedBytes };
    if (enough) log.info(summary, 'image garbage collection done');
    else
      log.warn(
        { ...summary, eligibleBytes: plan.freesBytes },
        'image garbage collection could not free enough: the rest is in use or too new',
      );
    return enough ? 'freed' : 'insufficient';
  }

  private record(storeBytes: number, images: number, usage: FsUsage): void {
    this.o.metrics.imageStoreBytes.set(storeBytes);
    this.o.metrics.imageStoreImages.set(images);
    this.o.metrics.imageFsUsageRatio.set(usage.capacityBytes > 0 ? 1 - usage.availableBytes / usage.capacityBytes : 0);
  }
}

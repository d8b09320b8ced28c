// Garbage collection of the image store, as the kubelet's image GC manager
// collects a runtime's images: when the filesystem holding the store is
// `highThresholdPercent` full, images are removed least recently used first
// until it would be `lowThresholdPercent` full; an image pinned by a pod on
// this node (pins.ts) or by the store (the test guest, as the kubelet's pause
// image), or pulled less than `minAgeMs` ago, is never removed.
// Parts shared between images (layers, taken-out files) count as freed only
// with the last image holding them. Runs every `periodMs` and after every
// pull (a pull is what fills the disk); each run first releases the pins of
// pods gone from the node and clears partial downloads of processes gone.
// Beside the filesystem an operator's byte quota on what the store holds
// (a filesystem shared with etcd and VM disks): past it, the same order
// frees down to the quota's low mark, whichever rule needs more. A pull is
// never refused for it, as the kubelet refuses none; what cannot be freed is
// logged and shown in vkvm_image_quota_excess_bytes.
import { statfs } from 'node:fs/promises';
import type { Logger } from '../log.js';
import type { AgentMetrics } from '../metrics.js';
import { GcLoop } from './gc-loop.js';
import { readInventory, type StoredImage } from './inventory.js';
import { pinnedImages, type PinStore } from './pins.js';
import { pruneStore, removeImage } from './remove.js';
import { imageIdOf, type ImageStore } from './store.js';

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

/** An operator's cap on the bytes a store holds (0: none), and what it holds now. */
export interface GcQuota {
  quotaBytes: number;
  heldBytes: number;
}

export interface GcPlan {
  usagePercent: number;
  /** What must go to get down to the low threshold (and the quota's low mark); 0 below both. */
  needBytes: number;
  /** What the quota alone asks for: held bytes down to its low mark once past it; 0 within it. */
  quotaNeedBytes: number;
  remove: Array<{ id: string; freesBytes: number }>;
  freesBytes: number;
}

/** The kubelet's arithmetic: usage = 100 - available·100/capacity, in whole percent. */
export function usagePercent(u: FsUsage): number {
  return u.capacityBytes > 0 ? 100 - Math.floor((u.availableBytes * 100) / u.capacityBytes) : 0;
}

/**
 * The quota's low mark, as the thresholds' ratio: a 10 GiB quota with 85/80
 * frees down to 80/85 of 10 GiB, so that one more download does not start
 * another pass at once.
 */
export function quotaLowMarkBytes(quotaBytes: number, policy: ImageGcPolicy): number {
  return Math.floor((quotaBytes * policy.lowThresholdPercent) / policy.highThresholdPercent);
}

/** Bytes over the quota; 0 within it or without one. */
export function quotaExcessBytes(q: GcQuota): number {
  return q.quotaBytes > 0 ? Math.max(0, q.heldBytes - q.quotaBytes) : 0;
}

/** What to remove, in order: least recently used first, pinned and young images left. Pure. */
export function planImageGc(o: {
  images: readonly StoredImage[];
  pinned: ReadonlySet<string>;
  usage: FsUsage;
  policy: ImageGcPolicy;
  nowMs: number;
  quota?: GcQuota;
}): GcPlan {
  const percent = usagePercent(o.usage);
  const fsNeedBytes =
    percent >= o.policy.highThresholdPercent
      ? Math.max(0, Math.ceil((o.usage.capacityBytes * (100 - o.policy.lowThresholdPercent)) / 100 - o.usage.availableBytes))
      : 0;
  const quotaNeedBytes = o.quota && quotaExcessBytes(o.quota) > 0 ? o.quota.heldBytes - quotaLowMarkBytes(o.quota.quotaBytes, o.policy) : 0;
  const needBytes = Math.max(fsNeedBytes, quotaNeedBytes);
  const plan: GcPlan = { usagePercent: percent, needBytes, quotaNeedBytes, remove: [], freesBytes: 0 };
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

/** A collecting pass's result, logged with what it did: at info when it freed enough, at warn when it could not. */
export function reportPass(
  plan: GcPlan,
  did: { removed: number; prunedBlobs?: number; freedBytes: number },
  log: Logger,
  what: string,
): GcResult {
  const enough = plan.freesBytes >= plan.needBytes;
  const summary = { usagePercent: plan.usagePercent, needBytes: plan.needBytes, quotaNeedBytes: plan.quotaNeedBytes, ...did };
  if (enough) log.info(summary, `${what} garbage collection done`);
  else
    log.warn(
      { ...summary, eligibleBytes: plan.freesBytes },
      `${what} garbage collection could not free enough: the rest is in use or too new`,
    );
  return enough ? 'freed' : 'insufficient';
}

export type ImageGcMetrics = Pick<
  AgentMetrics,
  | 'imageStoreBytes'
  | 'imageStoreImages'
  | 'imageFsUsageRatio'
  | 'imageGcRuns'
  | 'imagesGarbageCollected'
  | 'imageGcFreedBytes'
  | 'imageQuotaExcessBytes'
>;

export interface ImageGcOptions {
  store: ImageStore;
  pins: PinStore;
  /** Whether a pod UID is still on this node: in the pod cache, or its VM's launcher still there. */
  alive: (uid: string) => boolean;
  /** Blobs of pulls under way in this process: never pruned, whatever their age. */
  inUse: () => ReadonlySet<string>;
  policy: ImageGcPolicy;
  /** --image-store-quota-mib in bytes; 0: only the filesystem rule. */
  quotaBytes?: number;
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

/** Images the store pins for good, and those the pods on this node hold. */
async function pinnedIds(store: ImageStore, pins: PinStore): Promise<Set<string>> {
  const records = await store.records();
  return new Set([...records.filter((r) => r.pinned).map(imageIdOf), ...pinnedImages(await pins.list(), records).keys()]);
}

export class ImageGc extends GcLoop {
  private readonly now: () => number;
  private readonly fsUsage: (path: string) => Promise<FsUsage>;

  constructor(private readonly o: ImageGcOptions) {
    super({ periodMs: o.periodMs, runs: o.metrics.imageGcRuns, log: o.log, what: 'image' });
    this.now = o.now ?? Date.now;
    this.fsUsage = o.fsUsage ?? statfsUsage;
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
    const quotaBytes = this.o.quotaBytes ?? 0;
    const plan = planImageGc({
      images: inventory.images,
      pinned: await pinnedIds(store, pins),
      usage,
      policy: this.o.policy,
      nowMs: this.now(),
      quota: { quotaBytes, heldBytes: inventory.storeBytes },
    });
    this.o.metrics.imageQuotaExcessBytes.set({ cache: 'image-store' }, 0);
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
    const heldBytes = (await readInventory(store)).storeBytes;
    this.record(heldBytes, inventory.images.length - removed, after);
    const excessBytes = quotaExcessBytes({ quotaBytes, heldBytes });
    this.o.metrics.imageQuotaExcessBytes.set({ cache: 'image-store' }, excessBytes);
    if (excessBytes > 0)
      log.warn(
        { heldBytes, quotaBytes, excessBytes },
        'image store over --image-store-quota-mib: the rest is in use or too new; pulls go on, as the kubelet refuses none',
      );
    return reportPass(plan, { removed, prunedBlobs: pruned.blobs, freedBytes }, log, 'image');
  }

  private record(storeBytes: number, images: number, usage: FsUsage): void {
    this.o.metrics.imageStoreBytes.set(storeBytes);
    this.o.metrics.imageStoreImages.set(images);
    this.o.metrics.imageFsUsageRatio.set(usage.capacityBytes > 0 ? 1 - usage.availableBytes / usage.capacityBytes : 0);
  }
}

// Pins: the images a pod on this node uses, held from the moment its images
// are resolved until the pod is gone from the node, VM and all, so garbage
// collection and `vkvm images rm` never take an image a VM runs or is about
// to run (containerd's leases do this for content in use). One file per pod
// UID in the store's pins/, so they outlive agent restarts and the CLI sees
// them. A pin names the images as the pod does (held whatever they resolve
// to while the pod waits) and, once pulled, what they resolved to.
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseReference, storeKey } from './reference.js';
import { imageIdOf, type ImageRecord } from './store.js';

export interface Pin {
  uid: string;
  /** namespace/name, for people. */
  pod: string;
  /** The images as the pod names them. */
  references: string[];
  /** What they resolved to when pulled: repository@digest. */
  imageIds: string[];
}

/** Pod UIDs are UUIDs; anything else never becomes a file name. */
const UID = /^[A-Za-z0-9-]{1,64}$/;

export class PinStore {
  /** The tail of the critical sections run so far (see withLock). */
  private tail: Promise<unknown> = Promise.resolve();

  constructor(private readonly dir: string) {}

  /**
   * Runs `fn` with no other section of this store running: pins written in
   * one, and images removed in another after reading the pins, never
   * interleave (within this process; the CLI only refuses what is pinned).
   */
  withLock<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.tail.then(fn, fn);
    this.tail = run.catch(() => undefined);
    return run;
  }

  pin(pin: Pin): Promise<void> {
    if (!UID.test(pin.uid)) return Promise.reject(new Error(`pod UID ${JSON.stringify(pin.uid)} is not a UID`));
    return this.withLock(async () => {
      const temp = join(this.dir, `.${randomBytes(6).toString('hex')}.tmp`);
      await writeFile(temp, JSON.stringify(pin), { mode: 0o600 });
      await rename(temp, join(this.dir, `${pin.uid}.json`));
    });
  }

  async unpin(uid: string): Promise<void> {
    if (UID.test(uid)) await rm(join(this.dir, `${uid}.json`), { force: true });
  }

  async list(): Promise<Pin[]> {
    const names = (await readdir(this.dir).catch(() => [] as string[])).filter((n) => n.endsWith('.json') && !n.startsWith('.'));
    const pins = await Promise.all(
      names.map((n) =>
        readFile(join(this.dir, n), 'utf8').then(
          (s) => JSON.parse(s) as Pin,
          () => undefined,
        ),
      ),
    );
    return pins.filter((p): p is Pin => !!p && UID.test(p.uid));
  }
}

/** The images (repository@digest) the pins hold, with the pods holding each, given the store's records. */
export function pinnedImages(pins: readonly Pin[], records: readonly ImageRecord[]): Map<string, string[]> {
  const byName = new Map(records.map((r) => [r.reference, imageIdOf(r)]));
  const held = new Map<string, string[]>();
  const hold = (id: string | undefined, pod: string) => {
    if (id && !held.get(id)?.includes(pod)) held.set(id, [...(held.get(id) ?? []), pod]);
  };
  for (const pin of pins) {
    for (const id of pin.imageIds) hold(id, pin.pod);
    for (const image of pin.references) {
      try {
        hold(byName.get(storeKey(parseReference(image))), pin.pod);
      } catch {
        // A name that does not parse was never pulled: it holds nothing.
      }
    }
  }
  return held;
}

// Removing images, as `crictl rmi` does, and then the content no image
// refers to any more, as containerd's garbage collector does: a blob stays
// while some reference leads to it (reference → index → manifest → config
// and layers), and so do the files taken out of an image its manifest. Blobs
// younger than `minAgeMs` stay too: a pull under way (in the agent, while the
// CLI prunes) writes its blobs before its reference.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { blobsOf } from './inventory.js';
import type { ParsedManifest } from './manifest.js';
import { parseReference, storeKey } from './reference.js';
import type { ImageStore } from './store.js';

/**
 * Removes `image`: by tag, its tag (and its digest's name, unless another
 * tag still names that digest); by digest, every name of that digest in the
 * repository. Returns the references removed.
 */
export async function removeImage(store: ImageStore, image: string): Promise<string[]> {
  const ref = parseReference(image);
  const rec = await store.record(storeKey(ref));
  if (!rec) return [];
  const all = await store.records();
  const sameImage = all.filter((r) => r.repository === rec.repository && r.digest === rec.digest);
  const tags = sameImage.filter((r) => !r.reference.includes('@'));
  const digestNames = sameImage.filter((r) => r.reference.includes('@'));
  // By tag: that tag, and the digest's own name with the last tag that named it.
  const doomed = ref.digest ? sameImage : [rec, ...(tags.length === 1 ? digestNames : [])];
  for (const r of doomed) await store.removeRecord(r.reference);
  return doomed.map((r) => r.reference);
}

/** Blobs some reference leads to. */
async function referencedBlobs(store: ImageStore): Promise<Set<string>> {
  const keep = new Set<string>();
  const cache = new Map<string, ParsedManifest | undefined>();
  for (const rec of await store.records()) for (const digest of await blobsOf(store, rec, cache)) keep.add(digest);
  return keep;
}

/**
 * Deletes the blobs and taken-out files no reference leads to; returns how
 * many blobs and bytes went. `inUse`: blobs kept whatever their age (those
 * of pulls under way in this process).
 */
export async function pruneStore(
  store: ImageStore,
  opts: { minAgeMs: number; now?: number; inUse?: ReadonlySet<string> },
): Promise<{ blobs: number; bytes: number }> {
  const keep = await referencedBlobs(store);
  for (const digest of opts.inUse ?? []) keep.add(digest);
  const now = opts.now ?? Date.now();
  let blobs = 0;
  let bytes = 0;
  for (const digest of await store.blobDigests()) {
    if (keep.has(digest)) continue;
    const st = await stat(store.blobPath(digest)).catch(() => undefined);
    if (!st || now - st.mtimeMs < opts.minAgeMs) continue;
    await store.removeBlob(digest);
    blobs++;
    bytes += st.size;
  }
  for (const hex of await readdir(join(store.root, 'files')).catch(() => [] as string[])) {
    if (!keep.has(`sha256:${hex}`)) await store.removeFiles(`sha256:${hex}`);
  }
  return { blobs, bytes };
}

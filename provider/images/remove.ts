// Removing images, as `crictl rmi` does, and then the content no image
// refers to any more, as containerd's garbage collector does: a blob stays
// while some reference leads to it (reference → index → manifest → config
// and layers), and so do the files taken out of an image its manifest. Blobs
// younger than `minAgeMs` stay too: a pull under way (in the agent, while the
// CLI prunes) writes its blobs before its reference.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { parseManifest } from './manifest.js';
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
  const visit = async (digest: string, depth: number): Promise<void> => {
    if (keep.has(digest) || depth > 3) return;
    keep.add(digest);
    const parsed = await store.readBlob(digest).then(
      (b) => parseManifest(b),
      () => undefined,
    );
    if (parsed?.kind === 'index') for (const m of parsed.manifests) await visit(m.digest, depth + 1);
    if (parsed?.kind === 'manifest') for (const d of [parsed.config, ...parsed.layers]) keep.add(d.digest);
  };
  for (const rec of await store.records()) {
    await visit(rec.digest, 0);
    await visit(rec.manifestDigest, 0);
  }
  return keep;
}

/** Deletes the blobs and taken-out files no reference leads to; returns how many blobs and bytes went. */
export async function pruneStore(store: ImageStore, opts: { minAgeMs: number; now?: number }): Promise<{ blobs: number; bytes: number }> {
  const keep = await referencedBlobs(store);
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

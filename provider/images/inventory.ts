// The store seen as images rather than names: each image (repository@digest,
// whatever tags name it) with the parts it holds on disk — its index and
// manifest, config and layers, and the directory of files taken out of it —
// and their sizes, so that what removing an image frees can be counted with
// shared parts counted once. Also the store's size on disk, for its metrics,
// and which blobs a pull may take from the store rather than download.
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { parseManifest, type ParsedManifest } from './manifest.js';
import { imageIdOf, type ImageRecord, type ImageStore } from './store.js';

export interface StoredImage {
  /** repository@digest */
  id: string;
  names: string[];
  /** Part → bytes on disk: blobs by digest, a files directory as `files:<manifest digest>`. */
  parts: Map<string, number>;
  /** The latest pull of any of its names. */
  pulledAtMs: number;
  /** When a pod last stopped using it; its pull when none has. */
  lastUsedMs: number;
}

export interface Inventory {
  images: StoredImage[];
  /** Everything in blobs/ and files/, referenced or not. */
  storeBytes: number;
}

/** The blobs an image's digest leads to (index → manifests → config and layers), present or not. */
export async function blobsOf(
  store: ImageStore,
  rec: Pick<ImageRecord, 'digest' | 'manifestDigest'>,
  cache = new Map<string, ParsedManifest | undefined>(),
): Promise<Set<string>> {
  const found = new Set<string>();
  const parsed = async (digest: string) => {
    if (!cache.has(digest)) {
      cache.set(
        digest,
        await store.readBlob(digest).then(
          (b) => parseManifest(b),
          () => undefined,
        ),
      );
    }
    return cache.get(digest);
  };
  const visit = async (digest: string, depth: number): Promise<void> => {
    if (found.has(digest) || depth > 3) return;
    found.add(digest);
    const m = await parsed(digest);
    if (m?.kind === 'index') for (const child of m.manifests) await visit(child.digest, depth + 1);
    if (m?.kind === 'manifest') for (const d of [m.config, ...m.layers]) found.add(d.digest);
  };
  await visit(rec.digest, 0);
  await visit(rec.manifestDigest, 0);
  return found;
}

async function dirBytes(dir: string): Promise<number> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const sizes = await Promise.all(
    names.map((n) =>
      stat(join(dir, n)).then(
        (s) => s.size,
        () => 0,
      ),
    ),
  );
  return sizes.reduce((a, b) => a + b, 0);
}

export async function readInventory(store: ImageStore): Promise<Inventory> {
  const blobSizes = new Map<string, number>();
  for (const digest of await store.blobDigests()) {
    const st = await stat(store.blobPath(digest)).catch(() => undefined);
    if (st) blobSizes.set(digest, st.size);
  }
  const filesSizes = new Map<string, number>();
  for (const hex of await readdir(join(store.root, 'files')).catch(() => [] as string[])) {
    filesSizes.set(`files:sha256:${hex}`, await dirBytes(join(store.root, 'files', hex)));
  }
  const byId = new Map<string, StoredImage>();
  const cache = new Map<string, ParsedManifest | undefined>();
  for (const rec of await store.records()) {
    const id = imageIdOf(rec);
    let image = byId.get(id);
    if (!image) {
      const parts = new Map<string, number>();
      for (const digest of await blobsOf(store, rec, cache)) {
        const size = blobSizes.get(digest);
        if (size !== undefined) parts.set(digest, size);
      }
      const files = filesSizes.get(`files:${rec.manifestDigest}`);
      if (files !== undefined) parts.set(`files:${rec.manifestDigest}`, files);
      image = { id, names: [], parts, pulledAtMs: 0, lastUsedMs: 0 };
      byId.set(id, image);
    }
    image.names.push(rec.reference);
    image.pulledAtMs = Math.max(image.pulledAtMs, rec.pulledAtMs);
    image.lastUsedMs = Math.max(image.lastUsedMs, rec.lastUsedMs ?? rec.pulledAtMs);
  }
  const sum = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
  return { images: [...byId.values()], storeBytes: sum(blobSizes) + sum(filesSizes) };
}

/**
 * The blobs a pull from `repository` may take from the store instead of
 * downloading: those of images any pod may use (preloaded, or pulled without
 * credentials) and those of the same repository, whose registry lets whoever
 * reads the manifest read them. Any other blob is downloaded again even when
 * present: knowing the digest of another tenant's private layer, and serving
 * a manifest naming it from a registry of one's own, must not be enough to
 * get its content.
 */
export async function reusableBlobs(store: ImageStore, repository: string): Promise<Set<string>> {
  const reusable = new Set<string>();
  const cache = new Map<string, ParsedManifest | undefined>();
  for (const rec of await store.records()) {
    if (rec.access && !rec.access.anonymous && rec.repository !== repository) continue;
    for (const digest of await blobsOf(store, rec, cache)) reusable.add(digest);
  }
  return reusable;
}

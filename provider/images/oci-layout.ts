// `vkvm images import`: images from an OCI image layout — a directory, or a
// tar of one (gzip or zstd compressed or not), as `skopeo copy ... oci:DIR`,
// `umoci` or `docker buildx --output type=oci` write them — into the store,
// as `ctr images import` does, so an offline node runs images it was handed.
// Each image index.json lists is named by its io.containerd.image.name
// annotation, else by org.opencontainers.image.ref.name when that is a full
// reference, else by --name; this node's platform is taken from an index,
// and every blob is checked against its digest and size on the way in.
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ImageContentError } from './errors.js';
import { decompressed } from './layers.js';
import { parseManifest, selectPlatform, sha256Digest, type Descriptor } from './manifest.js';
import { parseReference, SHA256_DIGEST, type ImageReference } from './reference.js';
import type { ImageRecord, ImageStore } from './store.js';
import { readTar } from './tar.js';

/** What the layout may hold: everything else in an archive is ignored, never written. */
const LAYOUT_FILE = /^(oci-layout|index\.json|blobs\/sha256\/[a-f0-9]{64})$/;

export interface ImportOptions {
  /** Names the one image of a layout whose index carries no usable name. */
  name?: string;
  maxImageBytes: number;
  /** Records the images pinned: never garbage-collected. */
  pinned?: boolean;
}

/** Imports every image of the layout at `source`. */
export async function importLayout(source: string, store: ImageStore, opts: ImportOptions): Promise<ImageRecord[]> {
  if ((await stat(source)).isDirectory()) return importFrom(source, store, opts);
  const root = store.tempPath('layout');
  try {
    await unpackLayout(source, root);
    return await importFrom(root, store, opts);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

async function unpackLayout(archive: string, root: string): Promise<void> {
  for await (const { entry, body } of readTar(decompressed(archive))) {
    if (entry.type !== 'file' || !LAYOUT_FILE.test(entry.path)) continue;
    const target = join(root, entry.path);
    await mkdir(dirname(target), { recursive: true, mode: 0o700 });
    const fh = await open(target, 'wx', 0o600);
    try {
      for await (const chunk of body()) await fh.write(chunk);
    } finally {
      await fh.close();
    }
  }
}

const blobPath = (root: string, digest: string) => join(root, 'blobs', 'sha256', digest.slice('sha256:'.length));

/** A small blob of the layout (a manifest), checked against its descriptor. */
async function readChecked(root: string, d: Pick<Descriptor, 'digest' | 'size'>): Promise<Buffer> {
  if (!SHA256_DIGEST.test(d.digest)) throw new ImageContentError(`${d.digest} is not a sha256 digest`);
  const data = await readFile(blobPath(root, d.digest)).catch(() => {
    throw new ImageContentError(`the layout lacks blob ${d.digest}`);
  });
  if (sha256Digest(data) !== d.digest || data.length !== d.size)
    throw new ImageContentError(`blob ${d.digest} of the layout does not match its digest or size`);
  return data;
}

/** The name of an index.json entry: containerd's annotation, else a ref.name that is a whole reference. */
function nameOf(d: Descriptor, fallback: string | undefined): ImageReference {
  const candidates = [d.annotations?.['io.containerd.image.name'], d.annotations?.['org.opencontainers.image.ref.name']];
  for (const c of candidates) {
    if (c && /[/:@]/.test(c)) return parseReference(c);
  }
  if (fallback) return parseReference(fallback);
  throw new ImageContentError(`image ${d.digest} of the layout has no full reference as its name; give one with --name`);
}

async function importFrom(root: string, store: ImageStore, opts: ImportOptions): Promise<ImageRecord[]> {
  const layout = JSON.parse(await readFile(join(root, 'oci-layout'), 'utf8').catch(() => '{}')) as { imageLayoutVersion?: string };
  if (!layout.imageLayoutVersion) throw new ImageContentError('not an OCI image layout (no oci-layout file)');
  const index = parseManifest(await readFile(join(root, 'index.json')).catch(() => Buffer.from('{}')));
  if (index.kind !== 'index') throw new ImageContentError('index.json is not an index');
  if (opts.name && index.manifests.length !== 1)
    throw new ImageContentError(`--name names one image; the layout has ${index.manifests.length}`);
  const imported: ImageRecord[] = [];
  for (const entry of index.manifests) {
    const ref = nameOf(entry, opts.name);
    const top = await readChecked(root, entry);
    const manifests: Array<[string, Buffer]> = [[entry.digest, top]];
    let parsed = parseManifest(top, entry.mediaType);
    if (parsed.kind === 'index') {
      const child = selectPlatform(parsed.manifests);
      const body = await readChecked(root, child);
      manifests.push([child.digest, body]);
      parsed = parseManifest(body, child.mediaType);
      if (parsed.kind !== 'manifest') throw new ImageContentError('indexes nest too deep');
    }
    const blobs = [parsed.config, ...parsed.layers];
    const blobBytes = blobs.reduce((n, d) => n + d.size, 0);
    if (blobBytes > opts.maxImageBytes)
      throw new ImageContentError(`the image is ${blobBytes} bytes, more than the ${opts.maxImageBytes} this node accepts`);
    for (const d of blobs) {
      if (await store.hasBlob(d.digest, d.size)) continue;
      if (!(await stat(blobPath(root, d.digest)).catch(() => undefined))) throw new ImageContentError(`the layout lacks blob ${d.digest}`);
      await store.ingestBlob(d.digest, d.size, createReadStream(blobPath(root, d.digest)));
    }
    for (const [d, body] of [...manifests].reverse()) await store.writeBlob(d, body);
    const manifestDigest = manifests[manifests.length - 1]![0];
    imported.push(
      await store.recordImage(ref, {
        digest: entry.digest,
        manifestDigest,
        sizeBytes: blobBytes + manifests.reduce((n, [, b]) => n + b.length, 0),
        ...(opts.pinned ? { pinned: true as const } : {}),
      }),
    );
  }
  return imported;
}

// Writes an OCI image layout (what `vkvm images import` reads): one
// uncompressed tar layer per image, made of host files streamed through
// sha256, its config and manifest, and an index naming each image by
// containerd's io.containerd.image.name annotation. Deterministic: the same
// files give the same digests (mtime 0, fixed owners), so importing an
// unchanged image again stores nothing new.
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, rename, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { MEDIA_TYPES, sha256Digest, type Descriptor } from './manifest.js';

export type LayoutFile =
  | {
      /** Path in the image, without a leading slash (at most 100 bytes: plain ustar). */
      path: string;
      /** The host file whose bytes it holds. */
      source: string;
      /** An executable (0755) rather than a plain file (0644). */
      executable?: boolean;
    }
  | { path: string; /** A symbolic link to this target (at most 100 bytes). */ linkTo: string };

/** The parts of an OCI image config's `config` that a container runtime reads here. */
export interface LayoutRunConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
}

export interface LayoutImage {
  /** A full reference, e.g. localhost/vkvm/test-guest:v1. */
  name: string;
  files: LayoutFile[];
  /** Owner of every entry (default 107, KubeVirt's qemu user, for containerDisks); 0 for container images. */
  owner?: number;
  /** What a container of the image runs; none for disk images. */
  config?: LayoutRunConfig;
}

const BLOCK = 512;
/** containerDisks' files belong to uid/gid 107 (KubeVirt's qemu user), as quay.io/containerdisks ship them. */
const OWNER = 107;
/** Eleven octal digits. */
const USTAR_MAX_SIZE = 8 ** 11;

type EntryType = 'file' | 'executable' | 'directory' | 'symlink';
const TYPE_FLAG: Record<EntryType, string> = { file: '0', executable: '0', directory: '5', symlink: '2' };
const MODE: Record<EntryType, number> = { file: 0o644, executable: 0o755, directory: 0o755, symlink: 0o777 };

/** A ustar header; `size` 0 for a directory or a symlink. */
function ustarHeader(path: string, type: EntryType, size: number, owner: number, linkTo = ''): Buffer {
  const name = type === 'directory' ? `${path}/` : path;
  if (Buffer.byteLength(name) > 100) throw new Error(`${name} is longer than a ustar name (100 bytes)`);
  if (Buffer.byteLength(linkTo) > 100) throw new Error(`${name}: link target ${linkTo} is longer than ustar holds (100 bytes)`);
  if (size >= USTAR_MAX_SIZE) throw new Error(`${name} is ${size} bytes, more than a ustar size field holds (8 GiB)`);
  const h = Buffer.alloc(BLOCK);
  const octal = (value: number, at: number, width: number) => h.write(value.toString(8).padStart(width - 1, '0') + '\0', at, 'ascii');
  h.write(name, 0, 'utf8');
  octal(MODE[type], 100, 8);
  octal(owner, 108, 8);
  octal(owner, 116, 8);
  octal(size, 124, 12);
  octal(0, 136, 12);
  h.write('        ', 148, 'ascii');
  h.write(TYPE_FLAG[type], 156, 'ascii');
  h.write(linkTo, 157, 'utf8');
  h.write('ustar\0', 257, 'ascii');
  h.write('00', 263, 'ascii');
  const sum = h.reduce((a, b) => a + b, 0);
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'ascii');
  return h;
}

/** The parent directories of `files` (parents first), then the files, each once. */
function entriesOf(files: LayoutFile[]): Array<LayoutFile | { path: string }> {
  const dirs = new Set<string>();
  for (const f of files) {
    const parts = f.path.split('/').slice(0, -1);
    parts.forEach((_, i) => dirs.add(parts.slice(0, i + 1).join('/')));
  }
  return [...[...dirs].map((path) => ({ path })), ...files];
}

/** Writes the layer tar of `files` into the layout's blobs; returns its descriptor. */
async function writeLayer(blobsDir: string, files: LayoutFile[], owner: number): Promise<Descriptor> {
  const tmp = join(blobsDir, `.layer-${process.pid}-${Date.now()}`);
  const hash = createHash('sha256');
  const fh = await open(tmp, 'w', 0o644);
  let size = 0;
  const put = async (chunk: Buffer) => {
    hash.update(chunk);
    size += chunk.length;
    await fh.write(chunk);
  };
  try {
    for (const e of entriesOf(files)) {
      if ('linkTo' in e) {
        await put(ustarHeader(e.path, 'symlink', 0, owner, e.linkTo));
        continue;
      }
      if (!('source' in e)) {
        await put(ustarHeader(e.path, 'directory', 0, owner));
        continue;
      }
      const bytes = (await stat(e.source)).size;
      await put(ustarHeader(e.path, e.executable ? 'executable' : 'file', bytes, owner));
      for await (const chunk of createReadStream(e.source)) await put(chunk as Buffer);
      if (bytes % BLOCK) await put(Buffer.alloc(BLOCK - (bytes % BLOCK)));
    }
    // The end of an archive: two zero blocks.
    await put(Buffer.alloc(2 * BLOCK));
  } finally {
    await fh.close();
  }
  const digest = `sha256:${hash.digest('hex')}`;
  await rename(tmp, join(blobsDir, digest.slice('sha256:'.length)));
  return { mediaType: MEDIA_TYPES.ociLayer, digest, size };
}

async function writeJsonBlob(blobsDir: string, mediaType: string, doc: unknown): Promise<Descriptor> {
  const data = Buffer.from(JSON.stringify(doc));
  const digest = sha256Digest(data);
  await writeFile(join(blobsDir, digest.slice('sha256:'.length)), data, { mode: 0o644 });
  return { mediaType, digest, size: data.length };
}

/** Writes the layout of `images` into the directory `dir` (created; expected empty). */
export async function writeLayout(dir: string, images: LayoutImage[]): Promise<void> {
  const blobsDir = join(dir, 'blobs', 'sha256');
  await mkdir(blobsDir, { recursive: true, mode: 0o755 });
  const manifests: Descriptor[] = [];
  for (const image of images) {
    const layer = await writeLayer(blobsDir, image.files, image.owner ?? OWNER);
    const config = await writeJsonBlob(blobsDir, MEDIA_TYPES.ociConfig, {
      architecture: 'amd64',
      os: 'linux',
      // Uncompressed: the layer's digest is its diff ID.
      rootfs: { type: 'layers', diff_ids: [layer.digest] },
      config: image.config ?? {},
    });
    const manifest = await writeJsonBlob(blobsDir, MEDIA_TYPES.ociManifest, {
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.ociManifest,
      config,
      layers: [layer],
    });
    manifests.push({ ...manifest, annotations: { 'io.containerd.image.name': image.name } });
  }
  await writeFile(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, mediaType: MEDIA_TYPES.ociIndex, manifests }));
  // Last: a layout without it is not one, so a half-written layout is never imported.
  await writeFile(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
}

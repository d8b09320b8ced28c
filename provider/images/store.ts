// The node's image store, content-addressed as containerd's:
//
//   <root>/blobs/sha256/<hex>     manifests, indexes, configs and layers, each
//                                 written only after its bytes matched its
//                                 digest and size (root only, 0600 in 0700)
//   <root>/refs/<hash>.json       reference → digest, one file per reference
//   <root>/files/<manifest hex>/  files taken out of an image (the disk, a
//                                 kernel, an initrd), once per image; root's,
//                                 0444 in 0711 directories, because every VM's
//                                 QEMU (each its own uid) reads them as the
//                                 base under its own overlay
//   <root>/ingest/                downloads and extractions under way
//   <root>/pins/<pod uid>.json    the images a pod on this node uses (pins.ts)
//
// Everything lands by rename from ingest/, so a path in blobs/ or files/
// always holds complete, verified content, and the agent and `vkvm images`
// may work on one store at once.
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { fsyncPath } from '../atomic-file.js';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { join } from 'node:path';
import { ImageContentError } from './errors.js';
import type { WantedFile } from './layers.js';
import { sha256Digest } from './manifest.js';
import { mergeAccess, type ImageAccess } from './pull-access.js';
import { repositoryOf, storeKey, type ImageReference } from './reference.js';

export interface ImageRecord {
  /** The normalised reference: docker.io/library/busybox:latest, or repository@sha256:… */
  reference: string;
  repository: string;
  /** What the reference resolved to (an index or a manifest): the digest in imageID. */
  digest: string;
  /** This node's platform's manifest (the index entry, or `digest` itself). */
  manifestDigest: string;
  /** Manifests, config and layers as stored (layers compressed). */
  sizeBytes: number;
  pulledAtMs: number;
  /** When a pod last stopped using it (garbage collection takes the least recently used first). */
  lastUsedMs?: number;
  /** The credentials the registry accepted for it, when the agent pulled it; none: preloaded (pull-access.ts). */
  access?: ImageAccess;
  /** Never garbage-collected (the CRI's Image.pinned, as the kubelet keeps its pause image): the test guest `vkvm up` imports. */
  pinned?: true;
}

/** repository@digest: one image of one repository, whatever names it (the kubelet's imageID). */
export const imageIdOf = (rec: Pick<ImageRecord, 'repository' | 'digest'>) => `${rec.repository}@${rec.digest}`;

const hex = (digest: string) => digest.slice('sha256:'.length);
const hashOf = (s: string) => createHash('sha256').update(s).digest('hex');

export class ImageStore {
  constructor(readonly root: string) {}

  private get blobsDir() {
    return join(this.root, 'blobs', 'sha256');
  }
  private get refsDir() {
    return join(this.root, 'refs');
  }
  private get ingestDir() {
    return join(this.root, 'ingest');
  }
  get pinsDir() {
    return join(this.root, 'pins');
  }

  /** Creates the layout; the root and files/ are traversable (QEMU reaches its base images through them), the rest root's. */
  async init(): Promise<void> {
    await mkdir(this.root, { recursive: true });
    await chmod(this.root, 0o711);
    for (const dir of [this.blobsDir, this.refsDir, this.ingestDir, this.pinsDir]) await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(join(this.root, 'blobs'), 0o700);
    await mkdir(join(this.root, 'files'), { recursive: true, mode: 0o711 });
  }

  blobPath(digest: string): string {
    return join(this.blobsDir, hex(digest));
  }

  async hasBlob(digest: string, size?: number): Promise<boolean> {
    const st = await stat(this.blobPath(digest)).catch(() => undefined);
    return !!st && (size === undefined || st.size === size);
  }

  readBlob(digest: string): Promise<Buffer> {
    return readFile(this.blobPath(digest));
  }

  /** A fresh path under ingest/, for a download or an extraction that lands by rename. */
  tempPath(label: string): string {
    return join(this.ingestDir, `${label}.${process.pid}-${randomBytes(6).toString('hex')}`);
  }

  /** Stores a small blob held in memory (a manifest) after checking it against its digest. */
  async writeBlob(digest: string, data: Buffer): Promise<void> {
    if (sha256Digest(data) !== digest) throw new ImageContentError(`content does not match its digest ${digest}`);
    if (await this.hasBlob(digest, data.length)) return;
    const temp = this.tempPath(hex(digest));
    await writeFile(temp, data, { mode: 0o600 });
    await rename(temp, this.blobPath(digest));
  }

  /**
   * Streams a blob into the store through sha256, counting bytes: more than
   * `size`, or a different digest or size at the end, and nothing is kept.
   */
  async ingestBlob(
    digest: string,
    size: number,
    source: AsyncIterable<Buffer>,
    onBytes: (n: number) => void = () => undefined,
  ): Promise<void> {
    const temp = this.tempPath(hex(digest));
    const hash = createHash('sha256');
    let bytes = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        bytes += chunk.length;
        if (bytes > size) return done(new ImageContentError(`blob ${digest} is larger than the ${size} bytes its descriptor says`));
        hash.update(chunk);
        onBytes(bytes);
        done(null, chunk);
      },
    });
    try {
      // A write stream batches the body's many small chunks into few writes.
      await pipeline(source, meter, createWriteStream(temp, { flags: 'wx', mode: 0o600, highWaterMark: 1 << 20 }));
      const got = `sha256:${hash.digest('hex')}`;
      if (bytes !== size) throw new ImageContentError(`blob ${digest} is ${bytes} bytes, not the ${size} its descriptor says`);
      if (got !== digest) throw new ImageContentError(`blob ${digest} does not match its digest (its content is ${got})`);
      // fsync flushes the file, whichever descriptor asks.
      await fsyncPath(temp);
    } catch (err) {
      await rm(temp, { force: true });
      throw err;
    }
    await rename(temp, this.blobPath(digest));
  }

  async removeBlob(digest: string): Promise<void> {
    await rm(this.blobPath(digest), { force: true });
  }

  /** Digests of every blob in the store. */
  async blobDigests(): Promise<string[]> {
    return (await readdir(this.blobsDir).catch(() => [] as string[])).filter((n) => /^[a-f0-9]{64}$/.test(n)).map((n) => `sha256:${n}`);
  }

  private refPath(reference: string): string {
    return join(this.refsDir, `${hashOf(reference)}.json`);
  }

  async record(reference: string): Promise<ImageRecord | undefined> {
    try {
      return JSON.parse(await readFile(this.refPath(reference), 'utf8')) as ImageRecord;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  /**
   * Records an image under its reference and, named by tag, under
   * repository@digest too (as containerd records both). What a name already
   * knew of the same digest (its access, its last use, its pin) is kept: a pull
   * without credentials never makes a secret-pulled image preloaded.
   */
  async recordImage(
    ref: ImageReference,
    image: Pick<ImageRecord, 'digest' | 'manifestDigest' | 'sizeBytes' | 'access' | 'pinned'>,
  ): Promise<ImageRecord> {
    const { pinned, ...content } = image;
    const base: ImageRecord = { reference: storeKey(ref), repository: repositoryOf(ref), ...content, pulledAtMs: Date.now() };
    const names = [base.reference, ...(ref.digest ? [] : [imageIdOf(base)])];
    const written: ImageRecord[] = [];
    for (const reference of names) {
      const old = await this.record(reference);
      const same = old?.digest === base.digest ? old : undefined;
      const access = mergeAccess(same?.access, image.access);
      const rec: ImageRecord = {
        ...base,
        reference,
        ...(same?.lastUsedMs !== undefined ? { lastUsedMs: same.lastUsedMs } : {}),
        ...(access ? { access } : {}),
        ...(pinned || same?.pinned ? { pinned: true as const } : {}),
      };
      await this.putRecord(rec);
      written.push(rec);
    }
    return written[0]!;
  }

  /** Rewrites every name of one image (repository@digest); returns how many there were. */
  async updateImage(imageId: string, change: (rec: ImageRecord) => ImageRecord): Promise<number> {
    const names = (await this.records()).filter((r) => imageIdOf(r) === imageId);
    for (const rec of names) await this.putRecord(change(rec));
    return names.length;
  }

  async putRecord(rec: ImageRecord): Promise<void> {
    const temp = this.tempPath('ref');
    await writeFile(temp, JSON.stringify(rec), { mode: 0o600 });
    await rename(temp, this.refPath(rec.reference));
  }

  async removeRecord(reference: string): Promise<boolean> {
    const path = this.refPath(reference);
    const existed = !!(await stat(path).catch(() => undefined));
    await rm(path, { force: true });
    return existed;
  }

  async records(): Promise<ImageRecord[]> {
    const names = (await readdir(this.refsDir).catch(() => [] as string[])).filter((n) => n.endsWith('.json'));
    const recs = await Promise.all(
      names.map((n) =>
        readFile(join(this.refsDir, n), 'utf8').then(
          (s) => JSON.parse(s) as ImageRecord,
          () => undefined,
        ),
      ),
    );
    return recs.filter((r): r is ImageRecord => !!r).sort((a, b) => a.reference.localeCompare(b.reference));
  }

  /** Where a file taken out of the image with this manifest lives, named by what was asked for. */
  filePath(manifestDigest: string, wanted: WantedFile): string {
    return join(this.root, 'files', hex(manifestDigest), hashOf(JSON.stringify(wanted)).slice(0, 32));
  }

  async hasFile(path: string): Promise<boolean> {
    return !!(await stat(path).catch(() => undefined));
  }

  async removeTemp(path: string): Promise<void> {
    await rm(path, { force: true });
  }

  /** Moves an extracted file into files/: read-only for everyone, root's. */
  async publishFile(temp: string, manifestDigest: string, wanted: WantedFile): Promise<string> {
    const dir = join(this.root, 'files', hex(manifestDigest));
    await mkdir(dir, { recursive: true, mode: 0o711 });
    await chmod(temp, 0o444);
    const final = this.filePath(manifestDigest, wanted);
    await rename(temp, final);
    return final;
  }

  async removeFiles(manifestDigest: string): Promise<void> {
    await rm(join(this.root, 'files', hex(manifestDigest)), { recursive: true, force: true });
  }

  /** Partial downloads and extractions of processes that are gone (a crash); another live process's stay. */
  async clearIngest(): Promise<void> {
    for (const name of await readdir(this.ingestDir).catch(() => [] as string[])) {
      const pid = Number(/\.(\d+)-[0-9a-f]+$/.exec(name)?.[1]);
      if (pid && pid !== process.pid && alive(pid)) continue;
      if (pid !== process.pid) await rm(join(this.ingestDir, name), { force: true, recursive: true });
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

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
//
// Everything lands by rename from ingest/, so a path in blobs/ or files/
// always holds complete, verified content, and the agent and `vkvm images`
// may work on one store at once.
import { createHash, randomBytes } from 'node:crypto';
import { chmod, mkdir, open, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ImageContentError } from './errors.js';
import type { WantedFile } from './layers.js';
import { sha256Digest } from './manifest.js';
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
}

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

  /** Creates the layout; the root and files/ are traversable (QEMU reaches its base images through them), the rest root's. */
  async init(): Promise<void> {
    await mkdir(this.root, { recursive: true });
    await chmod(this.root, 0o711);
    for (const dir of [this.blobsDir, this.refsDir, this.ingestDir]) await mkdir(dir, { recursive: true, mode: 0o700 });
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
    const fh = await open(temp, 'wx', 0o600);
    try {
      for await (const chunk of source) {
        bytes += chunk.length;
        if (bytes > size) throw new ImageContentError(`blob ${digest} is larger than the ${size} bytes its descriptor says`);
        hash.update(chunk);
        await fh.write(chunk);
        onBytes(bytes);
      }
      const got = `sha256:${hash.digest('hex')}`;
      if (bytes !== size) throw new ImageContentError(`blob ${digest} is ${bytes} bytes, not the ${size} its descriptor says`);
      if (got !== digest) throw new ImageContentError(`blob ${digest} does not match its digest (its content is ${got})`);
      await fh.sync();
    } catch (err) {
      await fh.close();
      await rm(temp, { force: true });
      throw err;
    }
    await fh.close();
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

  /** Records an image under its reference and, named by tag, under repository@digest too (as containerd records both). */
  async recordImage(ref: ImageReference, image: Pick<ImageRecord, 'digest' | 'manifestDigest' | 'sizeBytes'>): Promise<ImageRecord> {
    const rec: ImageRecord = { reference: storeKey(ref), repository: repositoryOf(ref), ...image, pulledAtMs: Date.now() };
    await this.putRecord(rec);
    if (!ref.digest) await this.putRecord({ ...rec, reference: `${rec.repository}@${rec.digest}` });
    return rec;
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

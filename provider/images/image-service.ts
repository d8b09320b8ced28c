// Pulls images into the store and takes files out of them, as the kubelet's
// image manager and containerd do together: the pull policy decides whether
// the registry is asked at all; a pull resolves the reference to a digest
// (verified against the reference or the registry's Docker-Content-Digest),
// picks this node's platform, and fetches every blob it does not have, each
// verified before it is stored. Concurrent pulls of one image share one
// download (and of one blob, across images); at most `maxParallelPulls` run
// at once. Credentials are tried in the keyring's order until one works.
import type { Logger } from '../log.js';
import { SpecError } from '../../vmm/errors.js';
import { baseFormat } from '../../vmm/disks/base-image.js';
import { TokenCache } from './auth.js';
import { ImageContentError, ImagePullError, RegistryError } from './errors.js';
import { HttpClient } from './http.js';
import type { DockerKeyring, RegistryCredential } from './keyring.js';
import { extractFiles, type WantedFile } from './layers.js';
import { parseManifest, selectPlatform, sha256Digest, type Descriptor } from './manifest.js';
import {
  formatReference,
  manifestSelector,
  parseReference,
  repositoryOf,
  storeKey,
  type ImageReference,
  type PullPolicy,
} from './reference.js';
import { RegistryClient, type RegistryAccess } from './registry-client.js';
import type { ImageRecord, ImageStore } from './store.js';

export interface ImageServiceOptions {
  store: ImageStore;
  /** Registries besides loopback that may answer plain HTTP (host or host:port). */
  insecureRegistries?: readonly string[];
  /** PEM certificates trusted for registries besides the system's roots. */
  registryCaPems?: readonly string[];
  maxParallelPulls: number;
  /** Largest image (its blobs) and largest file taken out of one. */
  maxImageBytes: number;
  /** A registry request fails after this long without a byte. */
  idleTimeoutMs?: number;
  log: Logger;
}

export interface PullRequest {
  /** As the pod or VMI writes it. */
  image: string;
  policy: PullPolicy;
  keyring?: DockerKeyring;
  /** Called once the policy has decided to ask the registry (the kubelet's Pulling event). */
  onPulling?: () => void;
  log?: Logger;
}

/** An image in the store, ready to take files from. */
export interface ReadyImage extends ImageRecord {
  /** `repository@digest`, what the kubelet reports as a container's imageID. */
  imageID: string;
  /** Whether the registry was asked (false: present, by the pull policy's leave). */
  pulled: boolean;
}

/** Blobs above this size get progress lines while they download. */
const PROGRESS_MIN_BYTES = 64 * 2 ** 20;
const PROGRESS_EVERY_MS = 10_000;
const MAX_INDEX_DEPTH = 2;

/** Runs at most `n` tasks at once, in arrival order. */
class Limit {
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  constructor(private readonly n: number) {}
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.running >= this.n) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
    try {
      return await task();
    } finally {
      this.running--;
      this.waiting.shift()?.();
    }
  }
}

const asReady = (rec: ImageRecord, pulled: boolean): ReadyImage => ({ ...rec, imageID: `${rec.repository}@${rec.digest}`, pulled });

export class ImageService {
  private readonly access: RegistryAccess;
  private readonly limit: Limit;
  /** Pulls under way, by store key and credential. */
  private readonly pulls = new Map<string, Promise<ReadyImage>>();
  /** Blob downloads under way, by digest. */
  private readonly blobs = new Map<string, Promise<void>>();
  /** Extractions under way, by manifest digest and wanted files. */
  private readonly extractions = new Map<string, Promise<string[]>>();

  constructor(private readonly o: ImageServiceOptions) {
    const http = new HttpClient(o.registryCaPems ?? []);
    const idleTimeoutMs = o.idleTimeoutMs ?? 60_000;
    this.access = { http, tokens: new TokenCache(http, idleTimeoutMs), insecureRegistries: o.insecureRegistries ?? [], idleTimeoutMs };
    this.limit = new Limit(o.maxParallelPulls);
  }

  /**
   * The image, pulled first when the policy says so: Never uses only what the
   * store has, IfNotPresent asks the registry only when it has nothing, and
   * Always re-resolves the reference (fetching only blobs it lacks). Every
   * failure is an ImagePullError with the kubelet's reason.
   */
  async ensure(req: PullRequest): Promise<ReadyImage> {
    let ref: ImageReference;
    try {
      ref = parseReference(req.image);
    } catch (err) {
      if (err instanceof ImagePullError) throw err;
      throw new ImagePullError('InvalidImageName', (err as Error).message, { cause: err });
    }
    if (req.policy !== 'Always') {
      const present = await this.present(ref);
      if (present) return asReady(present, false);
      if (req.policy === 'Never')
        throw new ImagePullError('ErrImageNeverPull', `Container image "${req.image}" is not present with pull policy of Never`);
    }
    req.onPulling?.();
    const creds = req.keyring?.lookup(repositoryOf(ref)) ?? [];
    try {
      return await this.pullWithAny(ref, creds, req.log ?? this.o.log);
    } catch (err) {
      throw new ImagePullError('ErrImagePull', `Failed to pull image "${req.image}": ${(err as Error).message}`, { cause: err });
    }
  }

  /** What the store has for `ref`, when all its blobs are there. */
  private async present(ref: ImageReference): Promise<ImageRecord | undefined> {
    const rec = await this.o.store.record(storeKey(ref));
    if (!rec || !(await this.o.store.hasBlob(rec.manifestDigest))) return undefined;
    const manifest = parseManifest(await this.o.store.readBlob(rec.manifestDigest));
    if (manifest.kind !== 'manifest') return undefined;
    const have = await Promise.all([manifest.config, ...manifest.layers].map((d) => this.o.store.hasBlob(d.digest, d.size)));
    return have.every(Boolean) ? rec : undefined;
  }

  /** As the kubelet: each matching credential in turn (anonymous when none matched); the last failure is reported. */
  private async pullWithAny(ref: ImageReference, creds: RegistryCredential[], log: Logger): Promise<ReadyImage> {
    let last: unknown;
    for (const cred of creds.length ? creds : [undefined]) {
      try {
        return await this.pullShared(ref, cred, log);
      } catch (err) {
        // Content that fails its digest is wrong whoever asks for it.
        if (!(err instanceof RegistryError)) throw err;
        if (cred)
          log.warn(
            { image: formatReference(ref), secret: cred.from, err: err.message },
            'pull with this credential failed; trying the next',
          );
        last = err;
      }
    }
    throw last;
  }

  private pullShared(ref: ImageReference, cred: RegistryCredential | undefined, log: Logger): Promise<ReadyImage> {
    const key = `${storeKey(ref)}|${cred ? `${cred.from}|${cred.username}` : ''}`;
    let pending = this.pulls.get(key);
    if (!pending) {
      pending = this.limit.run(() => this.pull(ref, cred, log)).finally(() => this.pulls.delete(key));
      this.pulls.set(key, pending);
    }
    return pending;
  }

  private async pull(ref: ImageReference, cred: RegistryCredential | undefined, log: Logger): Promise<ReadyImage> {
    const t0 = performance.now();
    const client = new RegistryClient(ref, cred, this.access);
    const fetched = await client.manifest(manifestSelector(ref));
    const digest = sha256Digest(fetched.body);
    if (ref.digest && digest !== ref.digest)
      throw new ImageContentError(`the registry sent a manifest with digest ${digest} for ${ref.digest}`);
    if (fetched.digestHeader && fetched.digestHeader !== digest) {
      throw new ImageContentError(`the manifest's digest is ${digest}, not the ${fetched.digestHeader} the registry claims`);
    }
    const manifests: Array<[string, Buffer]> = [[digest, fetched.body]];
    let parsed = parseManifest(fetched.body, fetched.contentType);
    for (let depth = 0; parsed.kind === 'index'; depth++) {
      if (depth >= MAX_INDEX_DEPTH) throw new ImageContentError('indexes nest too deep');
      const entry = selectPlatform(parsed.manifests);
      const child = await client.manifest(entry.digest);
      if (sha256Digest(child.body) !== entry.digest || child.body.length !== entry.size) {
        throw new ImageContentError(`the manifest ${entry.digest} the index names does not match its digest or size`);
      }
      manifests.push([entry.digest, child.body]);
      parsed = parseManifest(child.body, entry.mediaType);
    }
    const blobs = [parsed.config, ...parsed.layers];
    const blobBytes = blobs.reduce((n, d) => n + d.size, 0);
    if (blobBytes > this.o.maxImageBytes)
      throw new ImageContentError(`the image is ${blobBytes} bytes, more than the ${this.o.maxImageBytes} this node accepts`);
    // Settled all before failing: no download of this pull is still writing when its error is reported.
    const downloads = await Promise.allSettled(blobs.map((d) => this.blob(client, d, log)));
    const failed = downloads.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    // Manifests last: a manifest in the store means its blobs are there.
    for (const [d, body] of [...manifests].reverse()) await this.o.store.writeBlob(d, body);
    const manifestDigest = manifests[manifests.length - 1]![0];
    const rec = await this.o.store.recordImage(ref, {
      digest,
      manifestDigest,
      sizeBytes: blobBytes + manifests.reduce((n, [, b]) => n + b.length, 0),
    });
    log.info({ image: rec.reference, digest, bytes: rec.sizeBytes, ms: Math.round(performance.now() - t0) }, 'image pulled');
    return asReady(rec, true);
  }

  /** One blob into the store, unless it is there; a download another pull started is joined, and redone if it failed. */
  private async blob(client: RegistryClient, d: Descriptor, log: Logger): Promise<void> {
    if (await this.o.store.hasBlob(d.digest, d.size)) return;
    const running = this.blobs.get(d.digest);
    if (running) {
      try {
        return await running;
      } catch {
        // That pull's download failed (its credentials, its connection): this one tries its own.
      }
    }
    const pending: Promise<void> = this.download(client, d, log).finally(() => {
      if (this.blobs.get(d.digest) === pending) this.blobs.delete(d.digest);
    });
    this.blobs.set(d.digest, pending);
    return pending;
  }

  private async download(client: RegistryClient, d: Descriptor, log: Logger): Promise<void> {
    const res = await client.blob(d.digest);
    let lastLogMs = Date.now();
    const progress = (bytes: number) => {
      if (d.size < PROGRESS_MIN_BYTES || Date.now() - lastLogMs < PROGRESS_EVERY_MS) return;
      lastLogMs = Date.now();
      log.info({ blob: d.digest, bytes, totalBytes: d.size, percent: Math.floor((bytes / d.size) * 100) }, 'pulling');
    };
    try {
      await this.o.store.ingestBlob(d.digest, d.size, res.body, progress);
    } finally {
      res.body.destroy();
    }
  }

  /**
   * The files `wanted` from the image, taken out once per image into the
   * store and shared by every VM. `disk`: the first file must be a qcow2
   * without a backing or data file, or raw (what KubeVirt accepts).
   */
  async files(image: ReadyImage, wanted: readonly WantedFile[], opts: { disk: boolean }): Promise<string[]> {
    const key = `${image.manifestDigest}|${JSON.stringify(wanted)}`;
    let pending = this.extractions.get(key);
    if (!pending) {
      pending = this.extract(image, wanted, opts).finally(() => this.extractions.delete(key));
      this.extractions.set(key, pending);
    }
    try {
      return await pending;
    } catch (err) {
      if (err instanceof ImagePullError) throw err;
      throw new ImagePullError('ErrImagePull', `Failed to pull image "${image.reference}": ${(err as Error).message}`, { cause: err });
    }
  }

  private async extract(image: ReadyImage, wanted: readonly WantedFile[], opts: { disk: boolean }): Promise<string[]> {
    const store = this.o.store;
    const finals = wanted.map((w) => store.filePath(image.manifestDigest, w));
    if ((await Promise.all(finals.map((f) => store.hasFile(f)))).every(Boolean)) return finals;
    const manifest = parseManifest(await store.readBlob(image.manifestDigest));
    if (manifest.kind !== 'manifest') throw new ImageContentError(`${image.manifestDigest} is not an image manifest`);
    const temps = wanted.map(() => store.tempPath('file'));
    const found = await extractFiles(
      manifest.layers.map((l) => store.blobPath(l.digest)),
      wanted,
      temps,
      this.o.maxImageBytes,
    );
    try {
      if (opts.disk) await baseFormat(temps[0]!, 'disk');
    } catch (err) {
      await Promise.all(temps.map((t) => store.removeTemp(t)));
      if (!(err instanceof SpecError)) throw err;
      throw new ImageContentError(`${found[0]!.path}: ${err.causes.map((c) => c.message).join('; ')}`, { cause: err });
    }
    this.o.log.info(
      { image: image.reference, files: found.map((f) => f.path), bytes: found.reduce((n, f) => n + f.sizeBytes, 0) },
      'files taken out of image',
    );
    return Promise.all(temps.map((t, i) => store.publishFile(t, image.manifestDigest, wanted[i]!)));
  }

  close(): void {
    this.access.http.close();
  }
}

// OCI images the tests build themselves: layers made by GNU tar from files
// written to a scratch directory (so the product's tar reader is checked
// against an independent writer), compressed with gzip or zstd, manifests and
// indexes in OCI or Docker schema 2 form, and a pusher speaking the
// distribution API (monolithic blob uploads, then the manifest).
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';

export interface LayerFile {
  /** Path in the image, without a leading slash. */
  path: string;
  content?: Buffer | string;
  /** Makes a symbolic link to this target. */
  symlink?: string;
  /** Makes a hard link to this (earlier) path. */
  hardlink?: string;
  dir?: boolean;
}

export interface Blob {
  mediaType: string;
  digest: string;
  size: number;
  data: Buffer;
}

export type Compression = 'none' | 'gzip' | 'zstd';

export interface TestImage {
  manifest: Blob;
  config: Blob;
  layers: Blob[];
}

export const digestOf = (data: Buffer) => `sha256:${createHash('sha256').update(data).digest('hex')}`;
const blob = (mediaType: string, data: Buffer): Blob => ({ mediaType, digest: digestOf(data), size: data.length, data });

/** A tar of `files` in the order given (parents first), owned by 107:107 as quay.io/containerdisks' are. */
export function tarLayer(files: LayerFile[], format: 'gnu' | 'posix' = 'gnu'): Buffer {
  const dir = mkdtempSync(join(tmpdir(), 'vkvm-layer-'));
  try {
    const order: string[] = [];
    const add = (p: string) => {
      if (!order.includes(p)) order.push(p);
    };
    for (const f of files) {
      const parents = f.path.split('/').slice(0, -1);
      parents.forEach((_, i) => add(parents.slice(0, i + 1).join('/')));
      const full = join(dir, f.path);
      mkdirSync(dirname(full), { recursive: true });
      if (f.dir) mkdirSync(full, { recursive: true });
      else if (f.symlink !== undefined) symlinkSync(f.symlink, full);
      else if (f.hardlink !== undefined) linkSync(join(dir, f.hardlink), full);
      else writeFileSync(full, f.content ?? '');
      add(f.path);
    }
    return execFileSync(
      'tar',
      ['-C', dir, `--format=${format}`, '--owner=107', '--group=107', '--numeric-owner', '--no-recursion', '-cf', '-', ...order],
      { maxBuffer: 1 << 30 },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function compress(data: Buffer, how: Compression): Buffer {
  if (how === 'gzip') return gzipSync(data);
  if (how === 'zstd') return execFileSync('zstd', ['-q', '-c'], { input: data, maxBuffer: 1 << 30 });
  return data;
}

const LAYER_TYPES: Record<Compression, { oci: string; docker: string }> = {
  none: { oci: 'application/vnd.oci.image.layer.v1.tar', docker: 'application/vnd.oci.image.layer.v1.tar' },
  gzip: { oci: 'application/vnd.oci.image.layer.v1.tar+gzip', docker: 'application/vnd.docker.image.rootfs.diff.tar.gzip' },
  zstd: { oci: 'application/vnd.oci.image.layer.v1.tar+zstd', docker: 'application/vnd.oci.image.layer.v1.tar+zstd' },
};

/** An image of `layers` (bottom first), as an OCI or a Docker schema 2 manifest. */
export function buildImage(
  layers: Array<{ tar: Buffer; compression?: Compression }>,
  opts: { docker?: boolean; architecture?: string } = {},
): TestImage {
  const kind = opts.docker ? 'docker' : 'oci';
  const layerBlobs = layers.map((l) => blob(LAYER_TYPES[l.compression ?? 'gzip'][kind], compress(l.tar, l.compression ?? 'gzip')));
  const config = blob(
    opts.docker ? 'application/vnd.docker.container.image.v1+json' : 'application/vnd.oci.image.config.v1+json',
    Buffer.from(
      JSON.stringify({
        architecture: opts.architecture ?? 'amd64',
        os: 'linux',
        rootfs: { type: 'layers', diff_ids: layers.map((l) => digestOf(l.tar)) },
        config: {},
      }),
    ),
  );
  const manifestType = opts.docker ? 'application/vnd.docker.distribution.manifest.v2+json' : 'application/vnd.oci.image.manifest.v1+json';
  const doc = {
    schemaVersion: 2,
    mediaType: manifestType,
    config: { mediaType: config.mediaType, digest: config.digest, size: config.size },
    layers: layerBlobs.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size })),
  };
  return { manifest: blob(manifestType, Buffer.from(JSON.stringify(doc))), config, layers: layerBlobs };
}

/** An index (OCI) or manifest list (Docker) over images by platform; `attestation` adds a BuildKit attestation entry first. */
export function buildIndex(
  entries: Array<{ image: TestImage; architecture: string }>,
  opts: { docker?: boolean; attestation?: TestImage } = {},
): Blob {
  const type = opts.docker ? 'application/vnd.docker.distribution.manifest.list.v2+json' : 'application/vnd.oci.image.index.v1+json';
  const manifests = [
    ...(opts.attestation
      ? [
          {
            mediaType: opts.attestation.manifest.mediaType,
            digest: opts.attestation.manifest.digest,
            size: opts.attestation.manifest.size,
            platform: { os: 'unknown', architecture: 'unknown' },
            annotations: { 'vnd.docker.reference.type': 'attestation-manifest' },
          },
        ]
      : []),
    ...entries.map((e) => ({
      mediaType: e.image.manifest.mediaType,
      digest: e.image.manifest.digest,
      size: e.image.manifest.size,
      platform: { os: 'linux', architecture: e.architecture },
    })),
  ];
  return blob(type, Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: type, manifests })));
}

export function imageBlobs(image: TestImage): Blob[] {
  return [image.config, ...image.layers];
}

/**
 * Pushes blobs and then manifests (children before the index that names
 * them) to `base` (http://host:port) as `repo:tag`; `auth` is user:password.
 */
export async function pushImage(
  base: string,
  repo: string,
  tag: string,
  images: TestImage[],
  opts: { index?: Blob; auth?: string } = {},
): Promise<string> {
  const headers: Record<string, string> = opts.auth ? { authorization: `Basic ${Buffer.from(opts.auth).toString('base64')}` } : {};
  const ok = async (res: Response, what: string) => {
    if (!res.ok) throw new Error(`push ${what}: ${res.status} ${await res.text()}`);
  };
  for (const b of images.flatMap(imageBlobs)) {
    const head = await fetch(`${base}/v2/${repo}/blobs/${b.digest}`, { method: 'HEAD', headers });
    if (head.ok) continue;
    const start = await fetch(`${base}/v2/${repo}/blobs/uploads/`, { method: 'POST', headers });
    await ok(start, `upload of ${b.digest}`);
    const location = new URL(start.headers.get('location')!, base);
    location.searchParams.set('digest', b.digest);
    await ok(
      await fetch(location, { method: 'PUT', headers: { ...headers, 'content-type': 'application/octet-stream' }, body: b.data }),
      `blob ${b.digest}`,
    );
  }
  const put = async (m: Blob, ref: string) =>
    ok(
      await fetch(`${base}/v2/${repo}/manifests/${ref}`, {
        method: 'PUT',
        headers: { ...headers, 'content-type': m.mediaType },
        body: m.data,
      }),
      `manifest ${ref}`,
    );
  if (!opts.index) {
    await put(images[0]!.manifest, tag);
    return images[0]!.manifest.digest;
  }
  for (const image of images) await put(image.manifest, image.manifest.digest);
  await put(opts.index, tag);
  return opts.index.digest;
}

/** Writes `images` as an OCI image layout in `dir` (oci-layout, index.json, blobs/sha256/), each named by `annotations`. */
export function writeTestImagesToLayout(
  dir: string,
  images: Array<{ image: TestImage; index?: Blob; extra?: TestImage[]; annotations?: Record<string, string> }>,
): void {
  mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
  writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  const put = (b: Blob) => writeFileSync(join(dir, 'blobs', 'sha256', b.digest.slice(7)), b.data);
  const manifests = images.map(({ image, index, extra, annotations }) => {
    for (const i of [image, ...(extra ?? [])]) [i.manifest, ...imageBlobs(i)].forEach(put);
    const top = index ?? image.manifest;
    put(top);
    return { mediaType: top.mediaType, digest: top.digest, size: top.size, ...(annotations ? { annotations } : {}) };
  });
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests }),
  );
}

/**
 * A containerDisk as quay.io/containerdisks ship them: one gzip layer,
 * /disk/disk.img a qcow2 (empty: QEMU runs it, nothing boots), then
 * `extraLayers`. Its own virtual size makes each image's layer unique, so no
 * test finds its blobs already on the node.
 */
export function qcow2Image(dir: string, extraLayers: Buffer[] = []): TestImage {
  const file = join(dir, `disk-${randomBytes(4).toString('hex')}.qcow2`);
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', file, `${16 + Math.floor(Math.random() * 4096)}M`]);
  return buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: readFileSync(file) }]) }, ...extraLayers.map((tar) => ({ tar }))]);
}

/** The data of a kubernetes.io/dockerconfigjson Secret holding one registry's credentials. */
export const dockerConfigJson = (host: string, user: string, password: string) => ({
  '.dockerconfigjson': Buffer.from(
    JSON.stringify({ auths: { [host]: { auth: Buffer.from(`${user}:${password}`).toString('base64') } } }),
  ).toString('base64'),
});

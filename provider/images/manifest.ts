// Manifests and indexes, OCI and Docker schema 2, parsed and checked before
// anything they name is fetched; the platform this node runs picked from an
// index as containerd does (attestation entries skipped). Pure.
import { createHash } from 'node:crypto';
import { ImageContentError } from './errors.js';
import { SHA256_DIGEST } from './reference.js';

export const MEDIA_TYPES = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerSchema1: 'application/vnd.docker.distribution.manifest.v1+json',
  dockerSchema1Signed: 'application/vnd.docker.distribution.manifest.v1+prettyjws',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
  ociLayer: 'application/vnd.oci.image.layer.v1.tar',
  ociLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  ociLayerZstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  dockerLayer: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
} as const;

/** Every manifest type vkvm reads, for the Accept header: distribution refuses an index to a client that does not list it. */
export const MANIFEST_ACCEPT = [MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerList, MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest].join(
  ', ',
);

const LAYER_TYPES = new Set<string>([MEDIA_TYPES.ociLayer, MEDIA_TYPES.ociLayerGzip, MEDIA_TYPES.ociLayerZstd, MEDIA_TYPES.dockerLayer]);
const INDEX_TYPES = new Set<string>([MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerList]);
const MANIFEST_TYPES = new Set<string>([MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest]);

/** containerd's limit: a manifest or index larger than this is refused unread. */
export const MAX_MANIFEST_BYTES = 4 * 2 ** 20;

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  platform?: Platform;
  annotations?: Record<string, string>;
  urls?: string[];
}

export type ParsedManifest =
  | { kind: 'index'; mediaType: string; manifests: Descriptor[] }
  | { kind: 'manifest'; mediaType: string; config: Descriptor; layers: Descriptor[] };

export function sha256Digest(data: Buffer | string): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

function descriptor(raw: unknown, at: string): Descriptor {
  const d = raw as Partial<Descriptor> | null;
  if (typeof d !== 'object' || d === null) throw new ImageContentError(`${at} is not a descriptor`);
  if (typeof d.mediaType !== 'string' || !d.mediaType) throw new ImageContentError(`${at} has no mediaType`);
  if (typeof d.digest !== 'string' || !SHA256_DIGEST.test(d.digest))
    throw new ImageContentError(`${at} has digest ${JSON.stringify(d.digest)}; vkvm reads sha256 digests only`);
  if (!Number.isSafeInteger(d.size) || d.size! < 0) throw new ImageContentError(`${at} has no valid size`);
  return d as Descriptor;
}

/**
 * Parses a manifest or index. The media type comes from the document, else
 * from the response's Content-Type; a schema1 manifest (Docker before 1.10)
 * is refused, as containerd does by default.
 */
export function parseManifest(body: Buffer, contentType?: string): ParsedManifest {
  let doc: { schemaVersion?: number; mediaType?: string; manifests?: unknown[]; config?: unknown; layers?: unknown[] };
  try {
    doc = JSON.parse(body.toString('utf8')) as typeof doc;
  } catch {
    throw new ImageContentError('the manifest is not JSON');
  }
  const declared = (contentType ?? '').split(';')[0]!.trim();
  if (doc?.schemaVersion === 1 || declared === MEDIA_TYPES.dockerSchema1 || declared === MEDIA_TYPES.dockerSchema1Signed) {
    throw new ImageContentError(
      'the image has a Docker schema1 manifest, which vkvm does not read (nor containerd by default): push it again with a current client',
    );
  }
  if (doc?.schemaVersion !== 2) throw new ImageContentError(`unknown manifest schemaVersion ${JSON.stringify(doc?.schemaVersion)}`);
  const mediaType = doc.mediaType ?? (Array.isArray(doc.manifests) ? MEDIA_TYPES.ociIndex : declared || MEDIA_TYPES.ociManifest);
  if (INDEX_TYPES.has(mediaType)) {
    if (!Array.isArray(doc.manifests)) throw new ImageContentError('the index lists no manifests');
    return { kind: 'index', mediaType, manifests: doc.manifests.map((m, i) => descriptor(m, `manifests[${i}]`)) };
  }
  if (!MANIFEST_TYPES.has(mediaType)) throw new ImageContentError(`unsupported manifest media type ${mediaType}`);
  if (!Array.isArray(doc.layers)) throw new ImageContentError('the manifest lists no layers');
  const layers = doc.layers.map((l, i) => descriptor(l, `layers[${i}]`));
  const foreign = layers.find((l) => !LAYER_TYPES.has(l.mediaType));
  if (foreign)
    throw new ImageContentError(
      `layer ${foreign.digest} has media type ${foreign.mediaType}, which vkvm cannot unpack (tar, tar+gzip or tar+zstd)`,
    );
  return { kind: 'manifest', mediaType, config: descriptor(doc.config, 'config'), layers };
}

/** An entry of an index that is not an image: BuildKit's attestation manifests (platform unknown/unknown). */
function isAttestation(d: Descriptor): boolean {
  return (
    d.annotations?.['vnd.docker.reference.type'] === 'attestation-manifest' ||
    (d.platform?.os === 'unknown' && d.platform.architecture === 'unknown')
  );
}

const NODE_PLATFORM: Platform = { os: 'linux', architecture: 'amd64' };

/**
 * The index entry for `want`: the first with its os and architecture (amd64
 * has no variants to prefer). An index without one is refused, naming what it
 * has.
 */
export function selectPlatform(manifests: Descriptor[], want: Platform = NODE_PLATFORM): Descriptor {
  const images = manifests.filter((d) => !isAttestation(d));
  const match = images.find((d) => d.platform?.os === want.os && d.platform.architecture === want.architecture);
  if (match) return match;
  const have = images.map((d) =>
    d.platform ? [d.platform.os, d.platform.architecture, d.platform.variant].filter(Boolean).join('/') : 'unspecified',
  );
  throw new ImageContentError(`no ${want.os}/${want.architecture} image in the index (it has: ${have.join(', ') || 'nothing'})`);
}

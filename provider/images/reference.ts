// Image references normalised as Docker and containerd do
// (distribution/reference's ParseNormalizedNamed): a name without a registry
// is on docker.io, a one-component Docker Hub name is under library/, no tag
// means `latest`, and a digest, when given, is what is pulled. Pure.
import type { ImagePullPolicy } from '../../vmm/spec.js';
import { ImagePullError } from './errors.js';

export interface ImageReference {
  /** Registry host[:port]; `docker.io` for Docker Hub. */
  domain: string;
  /** Repository path inside the registry, e.g. `library/busybox`. */
  path: string;
  tag?: string;
  /** `sha256:<64 hex>`; wins over the tag. */
  digest?: string;
}

export const DOCKER_HUB = 'docker.io';
const LEGACY_DOCKER_HUB = 'index.docker.io';
const MAX_NAME_LENGTH = 255;

const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const DOMAIN =
  /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$/;
const TAG = /^[\w][\w.-]{0,127}$/;
const DIGEST = /^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$/;
export const SHA256_DIGEST = /^sha256:[a-f0-9]{64}$/;

const invalid = (raw: string, why: string) =>
  new ImagePullError('InvalidImageName', `Failed to apply default image tag "${raw}": couldn't parse image name "${raw}": ${why}`);

/** Parses and normalises `raw`; throws an ImagePullError (InvalidImageName) saying what is wrong. */
export function parseReference(raw: string): ImageReference {
  if (!raw) throw invalid(raw, 'repository name must have at least one component');
  let rest = raw;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest)) throw invalid(raw, 'invalid digest format');
    if (!SHA256_DIGEST.test(digest)) throw invalid(raw, 'only sha256 digests (64 lower-case hex digits) are supported');
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tag)) throw invalid(raw, 'invalid reference format');
  }
  if (rest.length > MAX_NAME_LENGTH) throw invalid(raw, `repository name must not be more than ${MAX_NAME_LENGTH} characters`);
  if (/^[a-f0-9]{64}$/.test(rest)) throw invalid(raw, 'invalid repository name (64-byte hexadecimal strings are image IDs, not names)');
  const slash = rest.indexOf('/');
  const first = slash < 0 ? '' : rest.slice(0, slash);
  // Docker's rule: the first component names a registry when it has a dot or a port, is localhost, or has capitals.
  const hasDomain = slash >= 0 && (/[.:]/.test(first) || first === 'localhost' || first.toLowerCase() !== first);
  let domain = hasDomain ? first : DOCKER_HUB;
  let path = hasDomain ? rest.slice(slash + 1) : rest;
  if (hasDomain && !DOMAIN.test(domain)) throw invalid(raw, 'invalid reference format');
  if (domain === LEGACY_DOCKER_HUB) domain = DOCKER_HUB;
  if (domain === DOCKER_HUB && !path.includes('/')) path = `library/${path}`;
  if (path.toLowerCase() !== path) throw invalid(raw, 'repository name must be lowercase');
  if (!path.split('/').every((c) => PATH_COMPONENT.test(c))) throw invalid(raw, 'invalid reference format');
  return { domain, path, ...(tag !== undefined ? { tag } : {}), ...(digest !== undefined ? { digest } : {}) };
}

/** `domain/path`: the repository, as the kubelet names it in imageID and looks up credentials for. */
export function repositoryOf(ref: ImageReference): string {
  return `${ref.domain}/${ref.path}`;
}

/** The fully qualified reference: `docker.io/library/busybox:latest`, with the digest when there is one. */
export function formatReference(ref: ImageReference): string {
  const tag = ref.tag ?? (ref.digest ? undefined : 'latest');
  return `${repositoryOf(ref)}${tag ? `:${tag}` : ''}${ref.digest ? `@${ref.digest}` : ''}`;
}

/** The store's name of a reference: the digest form when it has one (the digest wins), else name:tag. */
export function storeKey(ref: ImageReference): string {
  return ref.digest ? `${repositoryOf(ref)}@${ref.digest}` : formatReference(ref);
}

/** What the registry is asked for: the digest when there is one, else the tag. */
export function manifestSelector(ref: ImageReference): string {
  return ref.digest ?? ref.tag ?? 'latest';
}

export type PullPolicy = ImagePullPolicy;
export const PULL_POLICIES: readonly PullPolicy[] = ['Always', 'IfNotPresent', 'Never'];

/**
 * Kubernetes' default imagePullPolicy (SetDefaults_Container, which KubeVirt's
 * containerDisk defaulting copies): Always when the tag is `latest`, written
 * or implied (no tag and no digest); IfNotPresent otherwise, an unparseable
 * name included.
 */
export function defaultPullPolicy(image: string): PullPolicy {
  try {
    const ref = parseReference(image);
    return (ref.tag ?? (ref.digest ? undefined : 'latest')) === 'latest' ? 'Always' : 'IfNotPresent';
  } catch {
    return 'IfNotPresent';
  }
}

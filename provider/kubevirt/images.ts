// containerDisk and kernelBoot images: an OCI reference, which the node agent
// pulls (provider/images/), or one of the forms pods use besides (a host
// path, file:///path, an http(s) URL of a disk image, or the built-in test
// guest). An alias table maps the demo images of KubeVirt's documentation to
// the test guest, so its examples run on a node without internet access.
import type { ImagePullPolicy } from '../../vmm/spec.js';
import { defaultPullPolicy, PULL_POLICIES } from '../images/reference.js';
import { parseImage, TEST_GUEST_IMAGE, type BootSource } from '../vm-identity.js';
import type { Draft } from './draft.js';

/**
 * KubeVirt's quickstart and example images, run as the built-in test guest
 * (a Debian kernel and busybox initramfs, much like the CirrOS demo image:
 * a console, a shell, no package manager). Keyed by repository: any tag or
 * digest matches.
 */
export const DEFAULT_IMAGE_ALIASES: Readonly<Record<string, string>> = {
  'quay.io/kubevirt/cirros-container-disk-demo': TEST_GUEST_IMAGE,
  'quay.io/kubevirt/alpine-container-disk-demo': TEST_GUEST_IMAGE,
  'kubevirt/cirros-container-disk-demo': TEST_GUEST_IMAGE,
  'kubevirt/cirros-registry-disk-demo': TEST_GUEST_IMAGE,
  'registry:5000/kubevirt/cirros-container-disk-demo': TEST_GUEST_IMAGE,
};

/** The repository of an OCI reference: no docker.io prefix, tag or digest. Other strings come back unchanged. */
export function imageRepository(ref: string): string {
  let repo = ref.replace(/^docker\.io\/(library\/)?/, '');
  const at = repo.indexOf('@');
  if (at >= 0) repo = repo.slice(0, at);
  const colon = repo.lastIndexOf(':');
  if (colon > repo.lastIndexOf('/')) repo = repo.slice(0, colon);
  return repo;
}

/** Where an image's bytes come from once aliases are applied; null when vkvm cannot use it. */
export function resolveImage(ref: string, aliases: Readonly<Record<string, string>>): BootSource | null {
  return parseImage(aliases[ref] ?? aliases[imageRepository(ref)] ?? ref);
}

export const IMAGE_FORMS = `an OCI image reference, a host path (/path or file:///path), an http(s) URL of a qcow2 or raw image, or ${TEST_GUEST_IMAGE}`;

/** imagePullPolicy as written, else KubeVirt's default (Kubernetes' rule: Always for latest); an unknown value is reported at `at`. */
export function pullPolicyOf(d: Draft, raw: string | undefined, image: string, at: string): ImagePullPolicy {
  if ((PULL_POLICIES as readonly string[]).includes(raw ?? '')) return raw as ImagePullPolicy;
  // Reported here, at the user's field; the default stands in so vmm's validation does not report it again.
  if (raw) d.report(at, 'FieldValueNotSupported', `supported values: ${PULL_POLICIES.map((p) => `"${p}"`).join(', ')}`);
  return defaultPullPolicy(image);
}

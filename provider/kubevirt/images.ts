// containerDisk and kernelBoot images. vkvm has no container runtime, so an
// OCI reference cannot be pulled; instead an image is one of the forms pods
// use (a host path, file:///path, an http(s) URL of a disk image, or the
// built-in test guest), and an alias table maps OCI references, such as the
// demo images in KubeVirt's documentation, to one of those forms.
import { parseImage, TEST_GUEST_IMAGE, type BootSource } from '../vm-identity.js';

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

export const IMAGE_FORMS = `a host path (/path or file:///path), an http(s) URL of a qcow2 or raw image, ${TEST_GUEST_IMAGE}, or an image the node aliases to one of those`;

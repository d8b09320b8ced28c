// What the pod and VMI translators share: the names a VM derives from its
// object (libvirt domain name, stable MACs) and the forms a boot image takes.
// Its own module so that neither translator imports the other.
import { createHash } from 'node:crypto';

/** Where the VM boots from, as parsed from the container image. */
export type BootSource =
  | { kind: 'image'; path: string }
  | { kind: 'url'; url: string }
  | { kind: 'kernel'; kernelPath: string }
  /** An OCI reference, pulled by the node agent (provider/images/); whether it parses is the pull's to say (InvalidImageName). */
  | { kind: 'registry'; image: string };

export function parseImage(image: string): BootSource | null {
  if (image.startsWith('/')) return { kind: 'image', path: image };
  if (image.startsWith('file:///')) return { kind: 'image', path: decodeURIComponent(image.slice('file://'.length)) };
  if (/^https?:\/\/[^/]+\/.+/.test(image)) return { kind: 'url', url: image };
  if (image.startsWith('kernel:/')) return { kind: 'kernel', kernelPath: image.slice('kernel:'.length) };
  return image ? { kind: 'registry', image } : null;
}

/** Kubernetes' DNS-1123 label is not required of domain names; this keeps them readable and unique per node. */
export function domainName(namespace: string, name: string): string {
  return `${namespace}_${name}`;
}

/**
 * A stable MAC for an interface without macAddress: QEMU's locally
 * administered 52:54:00 prefix and three bytes of a hash of `seed` (the
 * firmware UUID, which the VM controller keeps across restarts) and the
 * interface name, so a restarted VM keeps its address.
 */
export function derivedMac(seed: string, interfaceName: string): string {
  const hash = createHash('sha256').update(`${seed}/${interfaceName}`).digest();
  return ['52', '54', '00', ...[...hash.subarray(0, 3)].map((b) => b.toString(16).padStart(2, '0'))].join(':');
}

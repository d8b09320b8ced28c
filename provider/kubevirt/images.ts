// containerDisk and kernelBoot images: an OCI reference, which the node agent
// pulls (provider/images/), or one of the forms pods use besides (a host
// path, file:///path, or an http(s) URL of a disk image). The test guest is
// an ordinary image in the node's store (provider/images/test-guest-images.ts).
import type { ImagePullPolicy } from '../../vmm/spec.js';
import { defaultPullPolicy, PULL_POLICIES } from '../images/reference.js';
import type { Draft } from './draft.js';

export const IMAGE_FORMS = 'an OCI image reference, a host path (/path or file:///path), or an http(s) URL of a qcow2 or raw image';

/** imagePullPolicy as written, else KubeVirt's default (Kubernetes' rule: Always for latest); an unknown value is reported at `at`. */
export function pullPolicyOf(d: Draft, raw: string | undefined, image: string, at: string): ImagePullPolicy {
  if ((PULL_POLICIES as readonly string[]).includes(raw ?? '')) return raw as ImagePullPolicy;
  // Reported here, at the user's field; the default stands in so vmm's validation does not report it again.
  if (raw) d.report(at, 'FieldValueNotSupported', `supported values: ${PULL_POLICIES.map((p) => `"${p}"`).join(', ')}`);
  return defaultPullPolicy(image);
}

// Who may use an image in the store without asking its registry, as the
// kubelet's image pull manager decides (KEP-2535, "ensure secret pulled
// images"): an image the agent pulled with a pod's pull secret is handed to
// another pod only when that pod presents credentials the registry accepted
// for it (the same secret, or another holding the same credentials); any
// other pod must have the registry accept its own first. An image pulled (or
// checked) without credentials is every pod's, and one the agent did not pull
// itself (`vkvm images import`, `vkvm images pull`) is preloaded: every pod's
// too, as under the kubelet's default policy, NeverVerifyPreloadedImages.
// The record lives in the image's store records (store.ts), so it goes
// wherever they go. Pure.
import { createHash } from 'node:crypto';
import type { RegistryCredential } from './keyring.js';

/** Which pull credentials the registry accepted for one image (repository@digest). */
export interface ImageAccess {
  /** Pulled, or accepted by the registry, without credentials: any pod may use it. */
  anonymous: boolean;
  /** The secret each came from (for people) and a hash of the credentials (what is matched). */
  credentials: Array<{ from: string; hash: string }>;
}

/** A credential's identity, never the credential: a pull secret rotated to other credentials no longer matches. */
export function credentialHash(cred: Pick<RegistryCredential, 'username' | 'password'>): string {
  return createHash('sha256').update(`${cred.username}\0${cred.password}`).digest('hex');
}

/**
 * Whether a pod presenting `creds` may use the image without asking the
 * registry: preloaded (no access record), pulled anonymously, or pulled
 * with one of these credentials.
 */
export function mayUseLocally(access: ImageAccess | undefined, creds: readonly RegistryCredential[]): boolean {
  if (!access || access.anonymous) return true;
  const accepted = new Set(access.credentials.map((c) => c.hash));
  return creds.some((c) => accepted.has(credentialHash(c)));
}

/** `access` with `cred` (undefined: anyone) added as accepted. */
export function withAccepted(access: ImageAccess | undefined, cred: RegistryCredential | undefined): ImageAccess {
  const base = access ?? { anonymous: false, credentials: [] };
  if (!cred) return { ...base, anonymous: true };
  const hash = credentialHash(cred);
  return { ...base, credentials: [...base.credentials.filter((c) => c.hash !== hash), { from: cred.from, hash }] };
}

/** Two records of one image merged: what either accepted (a record without one is preloaded, and adds nothing). */
export function mergeAccess(a: ImageAccess | undefined, b: ImageAccess | undefined): ImageAccess | undefined {
  if (!a || !b) return a ?? b;
  const hashes = new Set(a.credentials.map((c) => c.hash));
  return { anonymous: a.anonymous || b.anonymous, credentials: [...a.credentials, ...b.credentials.filter((c) => !hashes.has(c.hash))] };
}

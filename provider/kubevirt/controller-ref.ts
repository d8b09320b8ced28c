// The ownerReference a controller puts on what it makes: it controls it, and
// the garbage collector's foreground deletion waits for it.
import type { OwnerReference } from './types.js';

export function controllerRefTo(owner: { metadata: { name?: string; uid?: string } }, apiVersion: string, kind: string): OwnerReference {
  return { apiVersion, kind, name: owner.metadata.name!, uid: owner.metadata.uid!, controller: true, blockOwnerDeletion: true };
}

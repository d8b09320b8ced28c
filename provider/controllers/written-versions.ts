// What the VM/VMI controllers add to the shared informer (kube/informer.ts):
// telling their own recent writes from stale cached copies.
import type { CachedObject } from '../kube/informer.js';
/**
 * resourceVersion `a` is older than `b`. Versions are opaque to clients, but
 * every apiserver backed by etcd issues increasing integers; anything else is
 * never called older, so a caller that waits on this cannot wait forever.
 */
export function olderVersion(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b || !/^\d+$/.test(a) || !/^\d+$/.test(b)) return false;
  return BigInt(a) < BigInt(b);
}

/**
 * The resourceVersions this controller last wrote, per key: a sync that reads
 * a cached object older than its own last write would act on state it has
 * already changed (e.g. create a VMI the back-off it just recorded forbids).
 * Such a sync does nothing; the watch event of the write enqueues the key again.
 */
export class WrittenVersions {
  private readonly versions = new Map<string, string>();

  record(key: string, resourceVersion: string | undefined): void {
    if (resourceVersion) this.versions.set(key, resourceVersion);
  }

  /** The cached object predates this controller's last write to it. */
  stale(key: string, cached: CachedObject | undefined): boolean {
    const written = this.versions.get(key);
    if (!cached || written === undefined) {
      this.versions.delete(key);
      return false;
    }
    if (olderVersion(cached.metadata?.resourceVersion, written)) return true;
    this.versions.delete(key);
    return false;
  }
}

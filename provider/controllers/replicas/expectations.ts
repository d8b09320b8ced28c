// What a replica controller has asked the API server for and its caches do
// not show yet, per controller key (KubeVirt's UIDTrackingControllerExpectations,
// in the shape of vkvm's other controllers): the UIDs it created and the UIDs
// it deleted. While any is outstanding the controller does not scale, so a
// sync that runs before the watch events of its own writes arrive cannot
// create or delete twice. Observation is read from the cache itself, not
// counted from events: a created UID is seen once the cache holds it, a
// deleted one once the cache lacks it or shows it being deleted. An
// expectation older than EXPECTATION_TIMEOUT_MS is dropped (client-go's
// five minutes), so a lost event delays a controller but never stops it.

export const EXPECTATION_TIMEOUT_MS = 5 * 60_000;

/** How a UID stands in the controller's cache. */
export type CacheView = (uid: string) => 'present' | 'deleting' | 'absent';

interface Outstanding {
  created: Set<string>;
  deleted: Set<string>;
  sinceMs: number;
}

export class Expectations {
  private readonly byKey = new Map<string, Outstanding>();

  private of(key: string, nowMs: number): Outstanding {
    let o = this.byKey.get(key);
    if (!o) this.byKey.set(key, (o = { created: new Set(), deleted: new Set(), sinceMs: nowMs }));
    return o;
  }

  created(key: string, uid: string, nowMs: number): void {
    this.of(key, nowMs).created.add(uid);
  }

  deleted(key: string, uid: string, nowMs: number): void {
    this.of(key, nowMs).deleted.add(uid);
  }

  /** Every write of this key's is visible in the cache (or expired): the controller may scale again. */
  satisfied(key: string, cache: CacheView, nowMs: number): boolean {
    const o = this.byKey.get(key);
    if (!o) return true;
    for (const uid of o.created) if (cache(uid) !== 'absent') o.created.delete(uid);
    for (const uid of o.deleted) if (cache(uid) !== 'present') o.deleted.delete(uid);
    if ((o.created.size === 0 && o.deleted.size === 0) || nowMs - o.sinceMs > EXPECTATION_TIMEOUT_MS) {
      this.byKey.delete(key);
      return true;
    }
    return false;
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }
}

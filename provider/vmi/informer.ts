// A cluster-wide list-then-watch cache for the VM/VMI controllers (VMs, VMIs,
// launcher pods in every namespace), the same shape as pods/informer.ts:
// handlers only enqueue keys; client-node's ListWatch re-lists on 410 by
// itself but stops on any other error, so this restarts it with capped
// backoff. One instance per leadership term: stop() is final.
import { ListWatch, Watch, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';

export const objectKey = (namespace: string, name: string): string => `${namespace}/${name}`;
/** What the cache needs of an object; VM and VMI metadata carry timestamps as strings, not Dates. */
export interface CachedObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
}

export const keyOfObject = (o: CachedObject): string => objectKey(o.metadata?.namespace ?? 'default', o.metadata?.name ?? '');

export interface ClusterInformerOptions<T extends CachedObject> {
  clients: KubeClients;
  /** The watch path, e.g. /apis/kubevirt.io/v1/virtualmachines. */
  path: string;
  /** Lists every object (all namespaces) with the same label selector. */
  list: () => Promise<{ metadata?: { resourceVersion?: string }; items: T[] }>;
  labelSelector?: string;
  log: Logger;
}

export class ClusterInformer<T extends CachedObject> {
  private readonly lw: ListWatch<KubernetesObject>;
  private stopped = false;
  private retryDelayMs = 500;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(private readonly o: ClusterInformerOptions<T>) {
    const list = o.list as unknown as () => Promise<KubernetesListObject<KubernetesObject>>;
    this.lw = new ListWatch<KubernetesObject>(o.path, new Watch(o.clients.kc), list, false, o.labelSelector);
    this.lw.on('connect', () => {
      this.retryDelayMs = 500;
    });
    this.lw.on('error', (err: unknown) => this.restartLater(err));
  }

  /** Calls `handler` with every added, updated and deleted object (a relist reports deletions too). */
  onChange(handler: (obj: T) => void): void {
    for (const verb of ['add', 'update', 'delete'] as const) this.lw.on(verb, (obj) => handler(obj as T));
  }

  /** Resolves once a first list is in the cache, however many attempts that takes. */
  start(): Promise<void> {
    void this.run();
    return this.synced;
  }

  // Declared in this order: a field initializer after it would reset markSynced.
  private markSynced: () => void = () => {};
  private readonly synced = new Promise<void>((resolve) => {
    this.markSynced = resolve;
  });

  private async run(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.lw.start();
    } catch (err) {
      return this.restartLater(err);
    }
    // A failed list reports through 'error' and leaves no resource version.
    if (this.lw.latestResourceVersion()) this.markSynced();
  }

  private restartLater(err: unknown): void {
    if (this.stopped) return;
    this.o.log.warn({ err, path: this.o.path, retryInMs: this.retryDelayMs }, 'list/watch failed; restarting it');
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.run(), this.retryDelayMs);
    this.retryDelayMs = Math.min(this.retryDelayMs * 2, 30_000);
  }

  get(key: string): T | undefined {
    const [namespace, name] = key.split('/') as [string, string];
    return this.lw.get(name, namespace) as T | undefined;
  }

  list(): readonly T[] {
    return this.lw.list() as readonly T[];
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    await this.lw.stop();
  }
}

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

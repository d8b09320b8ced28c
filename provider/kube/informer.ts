// A list-then-watch cache (the node's pods, VMs, VMIs, launcher pods):
// handlers only enqueue keys; client-node's ListWatch re-lists on 410 by
// itself but stops on any other error, so this restarts it with capped
// backoff, and a restarted apiserver only delays its owner. stop() is final.
import { ListWatch, Watch, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from './client.js';
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
  fieldSelector?: string;
  log: Logger;
}

export class ClusterInformer<T extends CachedObject> {
  private readonly lw: ListWatch<KubernetesObject>;
  private stopped = false;
  private retryDelayMs = 500;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(private readonly o: ClusterInformerOptions<T>) {
    const list = o.list as unknown as () => Promise<KubernetesListObject<KubernetesObject>>;
    this.lw = new ListWatch<KubernetesObject>(o.path, new Watch(o.clients.kc), list, false, o.labelSelector, o.fieldSelector);
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

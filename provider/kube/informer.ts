// A list-then-watch cache (the node's pods, VMs, VMIs, launcher pods):
// handlers only enqueue keys; client-node's ListWatch re-lists on 410 by
// itself but stops on any other error, so this restarts it with capped
// backoff, and a restarted apiserver only delays its owner. A watch gone
// silent (half-open) ends as an error too (progress-watch.ts), and is
// restarted from its last resource version. stop() is final.
import { ListWatch, type KubernetesListObject, type KubernetesObject } from '@kubernetes/client-node';
import type { KubeClients } from './client.js';
import type { Logger } from '../log.js';
import { isNotFound } from './errors.js';
import { ProgressWatch } from './progress-watch.js';

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
  /** What to tell the operator when the API server does not serve `path` at all (a CRD not installed). */
  missingHint?: string;
  log: Logger;
}

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 30_000;

export class ClusterInformer<T extends CachedObject> {
  private readonly lw: ListWatch<KubernetesObject>;
  private stopped = false;
  private running = false;
  private retryDelayMs = FIRST_RETRY_MS;
  private retryTimer: NodeJS.Timeout | undefined;
  /** The operator was told the resource is missing; repeats go to debug until a list succeeds. */
  private toldMissing = false;

  constructor(private readonly o: ClusterInformerOptions<T>) {
    const list = o.list as unknown as () => Promise<KubernetesListObject<KubernetesObject>>;
    const watch = new ProgressWatch(o.clients.kc, o.clients.watchProgressDeadlineMs);
    this.lw = new ListWatch<KubernetesObject>(o.path, watch, list, false, o.labelSelector, o.fieldSelector);
    this.lw.on('error', (err: unknown) => this.restartLater(err));
  }

  /** Calls `handler` with every added, updated and deleted object (a relist reports deletions too). */
  onChange(handler: (obj: T) => void): void {
    for (const verb of ['add', 'update', 'delete'] as const) this.lw.on(verb, (obj) => handler(obj as T));
  }

  /** Resolves once a first list is in the cache, however many attempts that takes. Idempotent: one cache may feed several controllers. */
  start(): Promise<void> {
    if (!this.running) {
      this.running = true;
      void this.run();
    }
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
    // A failed list reports through 'error' and leaves no resource version. Only a list that worked resets the
    // back-off: client-node reports 'connect' before it lists, so a list failing at once would otherwise spin.
    if (this.lw.latestResourceVersion()) {
      this.markSynced();
      this.retryDelayMs = FIRST_RETRY_MS;
      this.toldMissing = false;
    }
  }

  private restartLater(err: unknown): void {
    if (this.stopped) return;
    if (isNotFound(err)) {
      // Not a passing fault: the resource type is not installed. Said once, then retried slowly until it is.
      this.retryDelayMs = MAX_RETRY_MS;
      const said = this.toldMissing;
      this.toldMissing = true;
      const message = `the API server does not serve ${this.o.path}${this.o.missingHint ? `: ${this.o.missingHint}` : ''}; checking again every ${MAX_RETRY_MS / 1000} s`;
      if (said) this.o.log.debug({ path: this.o.path }, message);
      else this.o.log.warn({ path: this.o.path }, message);
    } else {
      this.o.log.warn({ err, path: this.o.path, retryInMs: this.retryDelayMs }, 'list/watch failed; restarting it');
    }
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.run(), this.retryDelayMs);
    this.retryDelayMs = Math.min(this.retryDelayMs * 2, MAX_RETRY_MS);
  }

  /** By `namespace/name`, or by the name alone for a cluster-scoped object (a Node). */
  get(key: string): T | undefined {
    const slash = key.indexOf('/');
    return (slash < 0 ? this.lw.get(key) : this.lw.get(key.slice(slash + 1), key.slice(0, slash))) as T | undefined;
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

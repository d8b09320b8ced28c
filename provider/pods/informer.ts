// The pods bound to this node: a list-then-watch cache with the field selector
// spec.nodeName=<node>. Handlers only enqueue keys. client-node's ListWatch
// re-lists on 410 by itself but stops on any other error; this restarts it
// with capped backoff, so a restarted apiserver only delays the agent.
import { ListWatch, Watch, type V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';

export const podKey = (namespace: string, name: string): string => `${namespace}/${name}`;
export const keyOf = (pod: V1Pod): string => podKey(pod.metadata?.namespace ?? 'default', pod.metadata?.name ?? '');

export class PodInformer {
  private readonly lw: ListWatch<V1Pod>;
  private stopped = false;
  private retryDelayMs = 500;
  private retryTimer: NodeJS.Timeout | undefined;

  constructor(
    clients: KubeClients,
    nodeName: string,
    onKey: (key: string) => void,
    private readonly log: Logger,
  ) {
    const fieldSelector = `spec.nodeName=${nodeName}`;
    this.lw = new ListWatch<V1Pod>(
      '/api/v1/pods',
      new Watch(clients.kc),
      () => clients.core.listPodForAllNamespaces({ fieldSelector }),
      false,
      undefined,
      fieldSelector,
    );
    for (const verb of ['add', 'update', 'delete'] as const) this.lw.on(verb, (pod) => onKey(keyOf(pod)));
    this.lw.on('connect', () => {
      this.retryDelayMs = 500;
    });
    this.lw.on('error', (err: unknown) => this.restartLater(err));
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
    this.log.warn({ err, retryInMs: this.retryDelayMs }, 'pod list/watch failed; restarting it');
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.run(), this.retryDelayMs);
    this.retryDelayMs = Math.min(this.retryDelayMs * 2, 30_000);
  }

  get(key: string): V1Pod | undefined {
    const [namespace, name] = key.split('/') as [string, string];
    return this.lw.get(name, namespace);
  }

  list(): readonly V1Pod[] {
    return this.lw.list();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    await this.lw.stop();
  }
}

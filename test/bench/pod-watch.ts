// One watch on the pods of a namespace that notes, per pod, when each
// milestone was first seen (Date.now() as the event arrives): bound to a node,
// first status from the agent, Running, Ready, Succeeded, Failed. It lists
// first and watches from the list's resourceVersion, so no event after the
// list is missed, and resumes from the last resourceVersion when the server
// ends the watch. Waits are checked on every event: no polling.
import { Watch, type V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';
import { condition } from '../e2e/framework/wait.js';

/** Unix ms at which each milestone was first seen in the watch. */
export interface PodMarks {
  /** spec.nodeName set: the scheduler bound it. */
  scheduled?: number;
  /** containerStatuses present: the agent's first status write. */
  agentStatus?: number;
  running?: number;
  /** The Ready condition True; vkvm sets it on the guest's first console output. */
  ready?: number;
  succeeded?: number;
  failed?: number;
}

const RESUME_DELAY_MS = 100;

export class PodWatch {
  private readonly marks = new Map<string, PodMarks>();
  private readonly last = new Map<string, V1Pod>();
  private readonly waiters = new Set<() => void>();
  private resourceVersion = '';
  private abort: AbortController | undefined;
  private stopped = false;
  private broken: Error | undefined;
  /** Pod events (not bookmarks) delivered so far, and when the latest arrived (Unix ms): for waiting until statuses are still. */
  events = 0;
  lastEventAt = Date.now();

  private constructor(
    private readonly clients: KubeClients,
    private readonly namespace: string,
  ) {}

  /** Lists the namespace's pods, then watches from the list's resourceVersion. Resolves once the watch is open. */
  static async start(clients: KubeClients, namespace: string): Promise<PodWatch> {
    const w = new PodWatch(clients, namespace);
    const list = await clients.core.listNamespacedPod({ namespace });
    for (const p of list.items) w.observe(p, Date.now());
    w.resourceVersion = list.metadata?.resourceVersion ?? '';
    await w.open();
    return w;
  }

  /** Milestones of one pod so far. */
  of(name: string): PodMarks {
    return this.marks.get(name) ?? {};
  }

  /** The last version of the pod the watch delivered. */
  pod(name: string): V1Pod | undefined {
    return this.last.get(name);
  }

  /**
   * Resolves once `done()` holds, checked now and after every watch event;
   * rejects on timeout (with `describe()`), on abort and when the watch broke.
   */
  async until(what: string, done: () => boolean, opts: { timeoutMs: number; signal: AbortSignal; describe?: () => string }): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const finish = (err?: Error): void => {
        this.waiters.delete(check);
        clearTimeout(timer);
        opts.signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve();
      };
      const check = (): void => {
        if (this.broken) return finish(new Error(`pod watch broke while waiting until ${what}`, { cause: this.broken }));
        try {
          if (done()) finish();
        } catch (err) {
          finish(err as Error);
        }
      };
      const onAbort = (): void => finish(opts.signal.reason as Error);
      const timer = setTimeout(
        () =>
          finish(
            new Error(
              `timed out after ${opts.timeoutMs} ms waiting until ${what}${opts.describe ? `; last seen: ${opts.describe()}` : ''}`,
            ),
          ),
        opts.timeoutMs,
      );
      if (opts.signal.aborted) return onAbort();
      opts.signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.add(check);
      check();
    });
  }

  stop(): void {
    this.stopped = true;
    this.abort?.abort();
  }

  private observe(pod: V1Pod, atMs: number): void {
    const name = pod.metadata?.name;
    if (!name) return;
    this.last.set(name, pod);
    const m = this.marks.get(name) ?? {};
    const phase = pod.status?.phase;
    if (pod.spec?.nodeName) m.scheduled ??= atMs;
    if (pod.status?.containerStatuses?.length) m.agentStatus ??= atMs;
    if (phase === 'Running') m.running ??= atMs;
    if (condition(pod, 'Ready') === 'True') m.ready ??= atMs;
    if (phase === 'Succeeded') m.succeeded ??= atMs;
    if (phase === 'Failed') m.failed ??= atMs;
    this.marks.set(name, m);
  }

  private async open(): Promise<void> {
    if (this.stopped) return;
    this.abort = await new Watch(this.clients.kc).watch(
      `/api/v1/namespaces/${this.namespace}/pods`,
      { resourceVersion: this.resourceVersion, allowWatchBookmarks: true },
      (type: string, obj: V1Pod & { code?: number; message?: string }) => {
        const atMs = Date.now();
        if (type === 'ERROR') {
          // 410 Gone and the like: events were lost, so the marks could be wrong.
          this.broken = new Error(`watch error ${obj.code ?? ''}: ${obj.message ?? JSON.stringify(obj)}`);
        } else {
          if (obj.metadata?.resourceVersion) this.resourceVersion = obj.metadata.resourceVersion;
          if (type !== 'BOOKMARK') {
            this.events += 1;
            this.lastEventAt = atMs;
            this.observe(obj, atMs);
          }
        }
        for (const w of [...this.waiters]) w();
      },
      (err: unknown) => {
        if (this.stopped || this.broken) return;
        if (err) {
          this.broken = err instanceof Error ? err : new Error(String(err));
          for (const w of [...this.waiters]) w();
          return;
        }
        // The server ends watches after a while: resume where this one stopped.
        setTimeout(() => {
          this.open().catch((e: unknown) => {
            this.broken = e instanceof Error ? e : new Error(String(e));
            for (const w of [...this.waiters]) w();
          });
        }, RESUME_DELAY_MS);
      },
    );
  }
}

// The slow part of a VM's start, run beside the pod-sync workers, as the
// kubelet's image puller runs beside its pod workers: a registry pull or a URL
// download can take minutes, and a sync worker held that long would stall
// every other pod's start and deletion (eight slow URLs held all eight).
//
// Each pod has at most one preparation, for one spec; at most `maxParallel`
// bounded ones run at once and the others wait their turn, in arrival order
// (an unbounded one, whose fetches are capped where they happen, never waits
// behind them: a pod whose image is in the store starts while URLs trickle).
// Nothing is
// pushed into a pod's lifecycle: when a preparation settles its owner is told
// the pod's UID and queues the pod's sync, which polls for the result
// (level-triggered; a sync that finds it still running just returns).

export type PreparationResult<T> = { ok: true; value: T } | { ok: false; error: unknown };

interface Job<T> {
  /** What was being prepared (a spec's hash): a changed spec starts over. */
  forSpec: string;
  result?: PreparationResult<T>;
  /** Aborted when the preparation is no longer wanted: its slot frees at once. */
  abort: AbortController;
}

export interface PreparationsOptions {
  maxParallel: number;
  /** A preparation settled; must not block (it queues the pod's sync). */
  onSettled: (uid: string) => void;
  /** How many run or wait, after every change (a metric). */
  observe?: (inFlight: number) => void;
}

export class Preparations<T> {
  private readonly jobs = new Map<string, Job<T>>();
  private readonly running = new Set<Promise<void>>();
  private readonly waiting: Array<() => void> = [];
  private slotsInUse = 0;

  constructor(private readonly o: PreparationsOptions) {}

  /**
   * The pod's preparation of `forSpec`: 'pending' while it runs (begun now
   * when none was under way for that spec), its result once settled. A
   * result is handed out once; the next poll begins anew.
   */
  poll(
    uid: string,
    forSpec: string,
    prepare: (signal: AbortSignal) => Promise<T>,
    opts: { bounded: boolean } = { bounded: true },
  ): 'pending' | PreparationResult<T> {
    const job = this.jobs.get(uid);
    if (job?.forSpec === forSpec) {
      if (!job.result) return 'pending';
      this.jobs.delete(uid);
      return job.result;
    }
    job?.abort.abort(new Error("the pod's spec changed"));
    const fresh: Job<T> = { forSpec, abort: new AbortController() };
    this.jobs.set(uid, fresh);
    const run = this.inSlot(fresh.abort.signal, prepare, opts.bounded)
      .then(
        (value): PreparationResult<T> => ({ ok: true, value }),
        (error: unknown): PreparationResult<T> => ({ ok: false, error }),
      )
      .then((result) => {
        // Forgotten or replaced meanwhile: the result is of no use to anyone.
        if (this.jobs.get(uid) !== fresh) return;
        fresh.result = result;
        this.o.onSettled(uid);
      })
      .finally(() => {
        this.running.delete(run);
        this.o.observe?.(this.running.size);
      });
    this.running.add(run);
    this.o.observe?.(this.running.size);
    return 'pending';
  }

  /**
   * The pod's preparation is no longer wanted (its pod is being deleted): it
   * is aborted and its slot frees at once. A download shared with other pods
   * goes on for them (image-cache.ts); one nobody else wants is stopped.
   */
  forget(uid: string): void {
    this.jobs.get(uid)?.abort.abort(new Error('the pod is being deleted'));
    this.jobs.delete(uid);
  }

  /** Resolves once no preparation runs or waits (tests). */
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running);
  }

  isIdle(): boolean {
    return this.running.size === 0;
  }

  private async inSlot(signal: AbortSignal, prepare: (signal: AbortSignal) => Promise<T>, bounded: boolean): Promise<T> {
    if (bounded && this.slotsInUse >= this.o.maxParallel) await new Promise<void>((resolve) => this.waiting.push(resolve));
    if (bounded) this.slotsInUse++;
    try {
      // One aborted while it waited never runs; one aborted while running gives up its slot
      // even if what it awaits (a registry pull) does not heed the signal.
      signal.throwIfAborted();
      const aborted = new Promise<never>((_, reject) =>
        signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true }),
      );
      aborted.catch(() => undefined);
      return await Promise.race([prepare(signal), aborted]);
    } finally {
      if (bounded) {
        this.slotsInUse--;
        this.waiting.shift()?.();
      }
    }
  }
}

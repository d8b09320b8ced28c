// The slow part of a VM's start, run beside the pod-sync workers, as the
// kubelet's image puller runs beside its pod workers: a registry pull or a URL
// download can take minutes, and a sync worker held that long would stall
// every other pod's start and deletion (eight slow URLs held all eight).
//
// Each pod has at most one preparation, for one spec; at most `maxParallel`
// run at once and the others wait their turn, in arrival order. Nothing is
// pushed into a pod's lifecycle: when a preparation settles its owner is told
// the pod's UID and queues the pod's sync, which polls for the result
// (level-triggered; a sync that finds it still running just returns).

export type PreparationResult<T> = { ok: true; value: T } | { ok: false; error: unknown };

interface Job<T> {
  /** What was being prepared (a spec's hash): a changed spec starts over. */
  forSpec: string;
  result?: PreparationResult<T>;
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
  poll(uid: string, forSpec: string, prepare: () => Promise<T>): 'pending' | PreparationResult<T> {
    const job = this.jobs.get(uid);
    if (job?.forSpec === forSpec) {
      if (!job.result) return 'pending';
      this.jobs.delete(uid);
      return job.result;
    }
    const fresh: Job<T> = { forSpec };
    this.jobs.set(uid, fresh);
    // One forgotten while it waited for a slot never runs.
    const run = this.inSlot(() => (this.jobs.get(uid) === fresh ? prepare() : Promise.reject(new Error('no longer wanted'))))
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
   * The pod's preparation is no longer wanted (its pod is being deleted). One
   * already running is left to finish (a download or pull may be shared with
   * other pods, and leaves nothing of this pod's behind); its result is dropped.
   */
  forget(uid: string): void {
    this.jobs.delete(uid);
  }

  /** Resolves once no preparation runs or waits (tests). */
  async idle(): Promise<void> {
    while (this.running.size > 0) await Promise.all(this.running);
  }

  isIdle(): boolean {
    return this.running.size === 0;
  }

  private async inSlot(prepare: () => Promise<T>): Promise<T> {
    if (this.slotsInUse >= this.o.maxParallel) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.slotsInUse++;
    try {
      return await prepare();
    } finally {
      this.slotsInUse--;
      this.waiting.shift()?.();
    }
  }
}

// How a pod's VM gets started, from the lifecycle's Waiting, ImageBackOff or
// BackingOff to Running: the lifecycle says when (lifecycle.ts), the runtime
// does it (vm-runtime.ts). The fetching of images, which can take minutes,
// runs off the sync workers (preparations.ts); every sync of a pod in
// Preparing polls for it, and its end queues the pod's sync again.
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../clock.js';
import type { AgentMetrics } from '../metrics.js';
import type { VmSpec } from '../../vmm/spec.js';
import { waitMs, type LifecycleEvent, type PodLifecycle } from './lifecycle.js';
import { Preparations } from './preparations.js';
import { needsPreparation, specHash, type Prepared, type StartOutcome, type VmRuntime } from './vm-runtime.js';

export interface VmStartsOptions {
  runtime: Pick<VmRuntime, 'prepare' | 'start'>;
  /** Moves the pod's lifecycle on (PodController.apply); undefined when its VM was removed meanwhile. */
  apply: (pod: V1Pod, event: LifecycleEvent) => PodLifecycle | undefined;
  /** Queues the pod's sync. */
  sync: (key: string) => void;
  /** Queues the pod's sync after a delay. */
  syncAfter: (key: string, delayMs: number) => void;
  /** The lifecycle of a pod, by UID; undefined once its VM is removed. */
  lifecycle: (uid: string) => PodLifecycle | undefined;
  /** Drops what the registry knows of the VM's ended launcher, so a new one can start. */
  forgetLauncher: (uid: string) => void;
  maxParallelPreparations: number;
  clock: Clock;
  metrics: Pick<AgentMetrics, 'vmPreparations'>;
}

export class VmStarts {
  private readonly preparations: Preparations<Prepared>;

  constructor(private readonly o: VmStartsOptions) {
    this.preparations = new Preparations({
      maxParallel: o.maxParallelPreparations,
      observe: (n) => o.metrics.vmPreparations.set(n),
      onSettled: (uid) => {
        const lc = o.lifecycle(uid);
        if (lc) o.sync(lc.key);
      },
    });
  }

  /** Starts the VM, unless a pull's or a start's back-off holds it: then the pod syncs again when that is over. */
  async start(pod: V1Pod, spec: VmSpec): Promise<void> {
    const preparing = this.o.apply(pod, { type: 'startBegan' });
    if (preparing?.state.kind === 'Preparing') {
      // A new attempt: what an earlier one prepared and never used (it went Invalid meanwhile) may be stale.
      this.preparations.forget(preparing.uid);
      return this.carryOn(pod, preparing, spec);
    }
    this.syncWhenDue(preparing);
  }

  /** Restarts a stopped VM once its back-off is over; until then the pod syncs again when it is. */
  async restart(pod: V1Pod, spec: VmSpec): Promise<void> {
    const next = this.o.apply(pod, { type: 'restart' });
    if (!next) return;
    if (next.state.kind === 'BackingOff') return this.o.syncAfter(next.key, waitMs(next.state, this.o.clock.now()));
    this.o.forgetLauncher(next.uid);
    return this.start(pod, spec);
  }

  /**
   * A start under way (Preparing): its images are fetched off the sync
   * workers, then its launcher is started on this one. Called by every sync
   * while the state is Preparing; until the images are in, it just returns.
   */
  async carryOn(pod: V1Pod, lc: PodLifecycle, spec: VmSpec): Promise<void> {
    let prepared: Prepared = { type: 'prepared', resolved: { spec, fromRegistry: false }, pullingRecorded: false };
    if (needsPreparation(spec, lc)) {
      // Registry pulls wait for the image service's own cap, and CSI calls for their drivers; only URL downloads need a slot.
      const bounded = spec.disks.some((d) => d.source.kind === 'url');
      const polled = this.preparations.poll(lc.uid, specHash(spec), (signal) => this.o.runtime.prepare(pod, lc, spec, signal), { bounded });
      if (polled === 'pending') return;
      if (!polled.ok) this.failed(pod, polled.error);
      prepared = polled.value;
    }
    let outcome: StartOutcome;
    try {
      outcome = prepared.type === 'prepared' ? await this.o.runtime.start(pod, lc, spec, prepared) : prepared;
    } catch (err) {
      this.failed(pod, err);
    }
    this.syncWhenDue(this.o.apply(pod, outcome));
  }

  /** A failed start backs off: its launcher's events would otherwise start it again at once. */
  private failed(pod: V1Pod, err: unknown): never {
    this.syncWhenDue(this.o.apply(pod, { type: 'startFailed', message: (err as Error).message }));
    throw err;
  }

  /** A failed start's back-off holds the next attempt, its network included: the pod syncs again when it is over. */
  heldByBackOff(lc: PodLifecycle): boolean {
    if (lc.state.kind !== 'StartBackOff' || waitMs(lc.state, this.o.clock.now()) === 0) return false;
    this.syncWhenDue(lc);
    return true;
  }

  /** A pull's or start's back-off holds the pod: it syncs again when that is over (the queue's retries find it held). */
  syncWhenDue(lc: PodLifecycle | undefined): void {
    if (lc?.state.kind === 'ImageBackOff' || lc?.state.kind === 'StartBackOff')
      this.o.syncAfter(lc.key, waitMs(lc.state, this.o.clock.now()));
  }

  /** The pod's VM is being removed: a preparation of it is no longer wanted. */
  forget(uid: string): void {
    this.preparations.forget(uid);
  }

  isIdle(): boolean {
    return this.preparations.isIdle();
  }

  idle(): Promise<void> {
    return this.preparations.idle();
  }
}

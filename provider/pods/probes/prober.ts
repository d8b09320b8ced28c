// The node's prober, as the kubelet's prober manager: a worker per running
// VM with a readiness probe, running it every periodSeconds after
// initialDelaySeconds, its results tallied by the thresholds
// (probe-tally.ts). The status writer asks `ready` for the pod's and VMI's
// Ready, and so for the Service endpoints. A worker belongs to one run of the
// VM: a restarted VM is probed afresh, as a restarted container is.
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../clock.js';
import type { EventRecorder } from '../../kube/events.js';
import type { Logger } from '../../log.js';
import type { ProbeSpec } from './probe-spec.js';
import { INITIAL_READINESS, tally, type ProbeTally } from './probe-tally.js';
import { runProbe, type GuestAgent, type ProbeOutcome, type ProbeTarget } from './run-probe.js';

export interface ProberOptions {
  clock: Clock;
  events: Pick<EventRecorder, 'record'>;
  /** The VM's readiness changed: its status is written again. */
  onReadinessChange: (key: string) => void;
  log: Logger;
  /** One run of a probe (runProbe; a fake in unit tests). */
  run?: (spec: ProbeSpec, target: ProbeTarget) => Promise<ProbeOutcome>;
}

/** One running VM as probed: which run, where, and its probes. */
export interface ProbedVm {
  uid: string;
  key: string;
  pod: V1Pod;
  /** Identifies the VM's current run (its start time): a new run starts the worker afresh. */
  run: string;
  podIP?: string;
  guest: GuestAgent;
  readiness: ProbeSpec;
}

interface Worker {
  vm: ProbedVm;
  /** What the worker was made from: a new run or a changed probe makes it anew. */
  identity: string;
  tally: ProbeTally;
  cancel?: () => void;
  stopped: boolean;
}

export class Prober {
  private readonly workers = new Map<string, Worker>();
  private readonly run: (spec: ProbeSpec, target: ProbeTarget) => Promise<ProbeOutcome>;

  constructor(private readonly o: ProberOptions) {
    this.run = o.run ?? ((spec, target) => runProbe(spec.action, target, spec.timeoutMs));
  }

  /** The VM runs: its probe runs (started, kept, or made anew for a new run or a new probe). Idempotent. */
  follow(vm: ProbedVm): void {
    const identity = JSON.stringify([vm.run, vm.readiness]);
    const current = this.workers.get(vm.uid);
    if (current?.identity === identity) {
      current.vm = vm;
      return;
    }
    if (current) this.stopWorker(current);
    const worker: Worker = { vm, identity, tally: INITIAL_READINESS, stopped: false };
    this.workers.set(vm.uid, worker);
    this.schedule(worker, vm.readiness.initialDelayMs);
    // A new run is not Ready until its probe passes.
    if (current) this.o.onReadinessChange(vm.key);
  }

  /** The VM does not run (or is gone): its probe stops and its result goes. */
  forget(uid: string): void {
    const worker = this.workers.get(uid);
    if (!worker) return;
    this.stopWorker(worker);
    this.workers.delete(uid);
  }

  /** Whether the VM's readiness probe passes; undefined when it has none (the caller's default holds). */
  ready(uid: string): boolean | undefined {
    const worker = this.workers.get(uid);
    return worker ? worker.tally.result === 'success' : undefined;
  }

  stop(): void {
    for (const uid of [...this.workers.keys()]) this.forget(uid);
  }

  private stopWorker(worker: Worker): void {
    worker.stopped = true;
    worker.cancel?.();
  }

  private schedule(worker: Worker, delayMs: number): void {
    worker.cancel = this.o.clock.after(delayMs, () => void this.probeOnce(worker));
  }

  private async probeOnce(worker: Worker): Promise<void> {
    if (worker.stopped) return;
    const { vm } = worker;
    const spec = vm.readiness;
    const outcome = await this.run(spec, { ...(vm.podIP ? { podIP: vm.podIP } : {}), guest: vm.guest });
    if (worker.stopped) return;
    const before = worker.tally.result;
    worker.tally = tally(worker.tally, outcome, spec);
    if (!outcome.ok) this.o.events.record(vm.pod, 'Warning', 'Unhealthy', `Readiness probe failed: ${outcome.message ?? ''}`);
    if (worker.tally.result !== before) {
      this.o.log.info(
        { pod: vm.key, uid: vm.uid, ready: worker.tally.result === 'success', message: outcome.message },
        'readiness changed',
      );
      this.o.onReadinessChange(vm.key);
    }
    this.schedule(worker, spec.periodMs);
  }
}

// The node's prober, as the kubelet's prober manager: a worker per probe of a
// running VM (readiness, liveness, startup), running it every periodSeconds
// after initialDelaySeconds, its results tallied by the thresholds
// (probe-tally.ts). As the kubelet's workers do, readiness and liveness wait
// while a startup probe has not passed yet, and a startup probe stops once it
// has. The status writer asks `ready` for the pod's and VMI's Ready, and so
// for the Service endpoints; a failed liveness or startup probe is handed to
// `onFailure`, which kills the VM so that its owner restarts it. A worker
// belongs to one run of the VM: a restarted VM is probed afresh, as a
// restarted container is.
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../clock.js';
import type { EventRecorder } from '../../kube/events.js';
import type { Logger } from '../../log.js';
import type { ProbeKind, ProbeSpec, VmProbes } from './probe-spec.js';
import { INITIAL_READINESS, tally, type ProbeTally } from './probe-tally.js';
import { runProbe, type GuestAgent, type ProbeOutcome, type ProbeTarget } from './run-probe.js';

export interface ProberOptions {
  clock: Clock;
  events: Pick<EventRecorder, 'record'>;
  /** The VM's readiness changed: its status is written again. */
  onReadinessChange: (key: string) => void;
  /** The VM's liveness or startup probe failed past its threshold: the VM is to be killed as failed. */
  onFailure: (vm: ProbedVm, kind: 'liveness' | 'startup', message: string) => void;
  log: Logger;
  /** One run of a probe (runProbe; a fake in unit tests). */
  run?: (spec: ProbeSpec, target: ProbeTarget) => Promise<ProbeOutcome>;
}

/** One running VM as probed: which run, where, and its probes. */
export interface ProbedVm {
  uid: string;
  key: string;
  pod: V1Pod;
  /** Identifies the VM's current run (its start time): a new run starts the workers afresh. */
  run: string;
  podIP?: string;
  guest: GuestAgent;
  probes: VmProbes;
}

interface Worker {
  kind: ProbeKind;
  spec: ProbeSpec;
  tally: ProbeTally;
  cancel?: () => void;
  stopped: boolean;
}

/** One VM's workers, made for one run and one set of probes. */
interface VmWorkers {
  vm: ProbedVm;
  identity: string;
  workers: Worker[];
}

const KIND_LABEL: Record<ProbeKind, string> = { readiness: 'Readiness', liveness: 'Liveness', startup: 'Startup' };
/** The kubelet's starting results: not Ready until a pass; alive until failures say otherwise. */
const INITIAL: Record<ProbeKind, ProbeTally> = {
  readiness: INITIAL_READINESS,
  liveness: { result: 'success', run: 0 },
  startup: INITIAL_READINESS,
};

/** A startup probe starts failed, so its failure is counted, not changed into. */
const failedToStart = (w: Worker): boolean => w.tally.last === 'failure' && w.tally.run >= w.spec.failureThreshold;

export class Prober {
  private readonly vms = new Map<string, VmWorkers>();
  private readonly run: (spec: ProbeSpec, target: ProbeTarget) => Promise<ProbeOutcome>;

  constructor(private readonly o: ProberOptions) {
    this.run = o.run ?? ((spec, target) => runProbe(spec.action, target, spec.timeoutMs));
  }

  /** The VM runs: its probes run (started, kept, or made anew for a new run or new probes). Idempotent. */
  follow(vm: ProbedVm): void {
    const identity = JSON.stringify([vm.run, vm.probes]);
    const current = this.vms.get(vm.uid);
    if (current?.identity === identity) {
      current.vm = vm;
      return;
    }
    if (current) this.stopAll(current);
    const entry: VmWorkers = { vm, identity, workers: [] };
    for (const [kind, spec] of Object.entries(vm.probes) as [ProbeKind, ProbeSpec][]) {
      const worker: Worker = { kind, spec, tally: INITIAL[kind], stopped: false };
      entry.workers.push(worker);
      this.schedule(entry, worker, spec.initialDelayMs);
    }
    this.vms.set(vm.uid, entry);
    // A new run is not Ready until its probe passes.
    if (current) this.o.onReadinessChange(vm.key);
  }

  /** The VM does not run (or is gone): its probes stop and their results go. */
  forget(uid: string): void {
    const entry = this.vms.get(uid);
    if (!entry) return;
    this.stopAll(entry);
    this.vms.delete(uid);
  }

  /** Whether the VM's readiness probe passes; undefined when it has none (the caller's default holds). */
  ready(uid: string): boolean | undefined {
    const entry = this.vms.get(uid);
    const worker = entry?.workers.find((w) => w.kind === 'readiness');
    return entry && worker ? worker.tally.result === 'success' && this.started(entry) : undefined;
  }

  stop(): void {
    for (const uid of [...this.vms.keys()]) this.forget(uid);
  }

  /** Whether the VM's startup probe, if it has one, has passed. */
  private started(entry: VmWorkers): boolean {
    const startup = entry.workers.find((w) => w.kind === 'startup');
    return !startup || startup.tally.result === 'success';
  }

  private stopAll(entry: VmWorkers): void {
    for (const worker of entry.workers) {
      worker.stopped = true;
      worker.cancel?.();
    }
  }

  private schedule(entry: VmWorkers, worker: Worker, delayMs: number): void {
    worker.cancel = this.o.clock.after(delayMs, () => void this.probeOnce(entry, worker));
  }

  private async probeOnce(entry: VmWorkers, worker: Worker): Promise<void> {
    if (worker.stopped) return;
    // Readiness and liveness wait for the startup probe, as the kubelet's do.
    if (worker.kind !== 'startup' && !this.started(entry)) return this.schedule(entry, worker, worker.spec.periodMs);
    const { vm } = entry;
    const outcome = await this.run(worker.spec, { ...(vm.podIP ? { podIP: vm.podIP } : {}), guest: vm.guest });
    if (worker.stopped) return;
    const before = worker.tally.result;
    worker.tally = tally(worker.tally, outcome, worker.spec);
    const label = KIND_LABEL[worker.kind];
    if (!outcome.ok) this.o.events.record(vm.pod, 'Warning', 'Unhealthy', `${label} probe failed: ${outcome.message ?? ''}`);
    const changed = worker.tally.result !== before;
    if (changed) this.o.log.info({ pod: vm.key, uid: vm.uid, probe: worker.kind, result: worker.tally.result }, `${worker.kind} changed`);
    if (worker.kind === 'readiness') {
      if (changed) this.o.onReadinessChange(vm.key);
    } else if (worker.tally.result === 'failure' && (worker.kind === 'liveness' || failedToStart(worker))) {
      // The run is over: the VM is killed, and its next run gets new workers.
      this.stopAll(entry);
      this.o.onFailure(vm, worker.kind, `${label} probe failed: ${outcome.message ?? ''}`);
      return;
    } else if (worker.kind === 'startup' && worker.tally.result === 'success') {
      // Started: readiness, which waited, now counts.
      if (entry.workers.some((w) => w.kind === 'readiness')) this.o.onReadinessChange(vm.key);
      return;
    }
    this.schedule(entry, worker, worker.spec.periodMs);
  }
}

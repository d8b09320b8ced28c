// The node's admission of a pod, as the kubelet's canAdmitPod runs its admit
// handlers in order: first vkvm's own, a DaemonSet pod not meant for vkvm
// nodes is not a VM (daemon-pods.ts), a live migration's target pod is held
// Pending, neither admitted nor refused (migration-target.ts); then the eviction manager's (pressure
// conditions, admission.ts), then the predicates' resource fit (fit.ts)
// against the pods the node admitted that are not terminal. A refused pod fails as the
// kubelet's rejectPod fails it: phase Failed, the handler's reason, and
// "Pod was rejected: " before its message. `NodeAdmission` judges each pod
// once, before anything is made for it; the rest is pure.
import type { V1Pod } from '@kubernetes/client-node';
import type { EventRecorder } from '../kube/events.js';
import type { AgentMetrics } from '../metrics.js';
import type { PressureCondition } from '../node/status.js';
import { admissionRefusal } from './admission.js';
import { daemonPodRefusal, NOT_A_VM_REASON } from './daemon-pods.js';
import { fitRefusal } from './fit.js';
import type { LifecycleEvent, PodLifecycle } from './lifecycle.js';
import { HELD_REASON, migrationTargetHold } from './migration-target.js';

export interface Rejection {
  /** Evicted (pressure), or OutOfmemory, OutOfcpu, OutOfpods, ... (resources). */
  reason: string;
  message: string;
}

export interface NodeState {
  pressure: readonly PressureCondition[];
  /** The node's allocatable as its status reports it; no fit check without it. */
  allocatable?: Record<string, string>;
  /** The pods the node admitted that are not terminal, the judged one aside. */
  admitted: readonly V1Pod[];
}

export function judgeAdmission(pod: V1Pod, node: NodeState): Rejection | undefined {
  const notVm = daemonPodRefusal(pod);
  if (notVm) return { reason: NOT_A_VM_REASON, message: notVm };
  const pressure = admissionRefusal(pod, node.pressure);
  if (pressure) return { reason: 'Evicted', message: pressure };
  const fit = node.allocatable && fitRefusal(pod, node.admitted, node.allocatable);
  return fit ? { reason: fit.reason, message: `Pod was rejected: ${fit.message}` } : undefined;
}

/** A lifecycle whose VM no longer holds what it asked for: its run is over, it was refused or evicted, or it cannot run. */
const DONE = new Set<PodLifecycle['state']['kind']>(['Finished', 'Evicted', 'Invalid']);
const TERMINAL_PHASES = new Set(['Succeeded', 'Failed']);

/**
 * The pods the node admitted and that are not terminal (the kubelet's filterOutInactivePods), but `exceptUid`:
 * a pod being deleted holds its share until its VM is removed (and its lifecycle with it).
 */
export function admittedPods(lifecycles: Iterable<PodLifecycle>, podOf: (key: string) => V1Pod | undefined, exceptUid: string): V1Pod[] {
  const pods: V1Pod[] = [];
  for (const lc of lifecycles) {
    const pod = podOf(lc.key);
    if (lc.uid === exceptUid || !lc.admitted || DONE.has(lc.state.kind) || pod?.metadata?.uid !== lc.uid) continue;
    if (lc.state.kind !== 'Terminating' && TERMINAL_PHASES.has(pod.status?.phase ?? '')) continue;
    pods.push(pod);
  }
  return pods;
}

/** Oldest first, as the kubelet admits the pods it finds at start-up (PodsByCreationTime); by name on a tie, for a stable order. */
export function byCreationTime(pods: readonly V1Pod[]): V1Pod[] {
  const at = (p: V1Pod) => new Date(p.metadata?.creationTimestamp ?? 0).getTime();
  return [...pods].sort((a, b) => at(a) - at(b) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
}

export interface NodeAdmissionOptions {
  pods: { get(key: string): V1Pod | undefined };
  launchers: { get(uid: string): unknown };
  /** The lifecycles of the pods the agent acts on; their `admitted` says which the node took. */
  lifecycles: () => Iterable<PodLifecycle>;
  lifecycleOf: (pod: V1Pod) => PodLifecycle;
  /** Moves a lifecycle on (the controller's `apply`): the verdict is an event, and the status follows from it. */
  apply: (pod: V1Pod, event: LifecycleEvent) => unknown;
  nodePressure?: () => readonly PressureCondition[];
  nodeAllocatable?: () => Record<string, string>;
  metrics: Pick<AgentMetrics, 'podEvictions'>;
  events: Pick<EventRecorder, 'record'>;
  /** The node receives live migrations (its relay listens): a migration's target pod is not held. */
  receivesMigrations?: boolean;
}

/** The metric's cause per reason; the resource reasons (OutOfcpu, ...) are 'resources'. */
const CAUSES: Record<string, string> = { Evicted: 'admission', [NOT_A_VM_REASON]: 'not-a-vm' };

export class NodeAdmission {
  constructor(private readonly o: NodeAdmissionOptions) {}

  /**
   * Judges a pod not admitted yet; a VM found running after an agent restart was admitted before. Synchronous, so
   * two pods are never judged against the same free share. 'held': the pod must not be started at all.
   */
  admit(pod: V1Pod): 'held' | undefined {
    const held = this.o.receivesMigrations ? undefined : migrationTargetHold(pod);
    if (held) {
      this.o.events.record(pod, 'Warning', HELD_REASON, held);
      return 'held';
    }
    const lc = this.o.lifecycleOf(pod);
    if (lc.admitted || lc.state.kind === 'Evicted') return;
    const rejection = this.o.launchers.get(lc.uid)
      ? undefined
      : judgeAdmission(pod, {
          pressure: this.o.nodePressure?.() ?? [],
          allocatable: this.o.nodeAllocatable?.(),
          admitted: admittedPods(this.o.lifecycles(), (key) => this.o.pods.get(key), lc.uid),
        });
    this.o.apply(pod, rejection ? { type: 'evicted', ...rejection } : { type: 'admitted' });
    if (rejection) this.o.metrics.podEvictions.inc({ cause: CAUSES[rejection.reason] ?? 'resources' });
    return undefined;
  }

  /**
   * At start-up, as the kubelet re-admits the pods it finds: those admitted before (a VM found, a status that says
   * so) hold their share first, then the others are judged oldest first. Pods being deleted or terminal are not.
   */
  readmit(pods: readonly V1Pod[]): void {
    const byAge = byCreationTime(pods);
    for (const pod of byAge) if (this.o.lifecycleOf(pod).admitted || this.o.launchers.get(pod.metadata!.uid!)) this.admit(pod);
    for (const pod of byAge) if (!pod.metadata?.deletionTimestamp && !TERMINAL_PHASES.has(pod.status?.phase ?? '')) this.admit(pod);
  }
}

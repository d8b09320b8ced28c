// Whether a pod fits on the node beside the pods it already admitted, as the
// kubelet's predicateAdmitHandler runs the scheduler's NodeResourcesFit
// (pkg/kubelet/lifecycle/predicate.go; noderesources/fit.go fitsRequest): a
// pod bound with spec.nodeName skips the scheduler, so the node must not
// start what its allocatable cannot hold. Requests as the scheduler counts
// them (component-helpers' PodRequests): the containers' sum, at least the
// largest init container (with the sidecars started before it), or the
// pod-level requests where the pod sets them, plus the pod's overhead; no
// requests is zero. Pure.
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { parseQuantity } from '../kube/quantity.js';

/** A pod's requests, in the scheduler's units: cpu in millicores, the others in whole units (bytes, devices). */
export type Requests = Map<string, number>;

export interface FitRefusal {
  /** The kubelet's reason: OutOfcpu, OutOfmemory, OutOfephemeral-storage, OutOfpods, OutOf<extended resource>. */
  reason: string;
  /** Its message, which the pod status gets behind "Pod was rejected: ". */
  message: string;
}

/** Go's Quantity.Value()/MilliValue() round up; the float noise of "0.1 * 1000" must not. */
const roundUp = (x: number) => Math.ceil(Number(x.toPrecision(12)));

function amount(name: string, raw: string): number {
  const q = parseQuantity(raw) ?? 0;
  return roundUp(name === 'cpu' ? q * 1000 : q);
}

function add(into: Requests, list: Record<string, string> | undefined): void {
  for (const [name, raw] of Object.entries(list ?? {})) into.set(name, (into.get(name) ?? 0) + amount(name, raw));
}

function max(into: Requests, other: Requests): void {
  for (const [name, v] of other) into.set(name, Math.max(into.get(name) ?? 0, v));
}

const requestsOf = (c: V1Container) => c.resources?.requests;

/** What the pod asks of the node while it runs, as the scheduler counts it. */
export function podRequests(pod: V1Pod): Requests {
  const total: Requests = new Map();
  for (const c of pod.spec?.containers ?? []) add(total, requestsOf(c));
  // An init container runs beside the sidecars (restartable init containers) started before it; sidecars run on.
  const sidecars: Requests = new Map();
  const initPeak: Requests = new Map();
  for (const c of pod.spec?.initContainers ?? []) {
    if (c.restartPolicy === 'Always') {
      add(total, requestsOf(c));
      add(sidecars, requestsOf(c));
      max(initPeak, sidecars);
    } else {
      const running: Requests = new Map(sidecars);
      add(running, requestsOf(c));
      max(initPeak, running);
    }
  }
  max(total, initPeak);
  // Pod-level resources (KEP-2837) stand for the containers' sum, for the resources they name.
  for (const [name, raw] of Object.entries(pod.spec?.resources?.requests ?? {})) total.set(name, amount(name, raw));
  add(total, pod.spec?.overhead);
  return total;
}

/**
 * The pod's CPU request in millicores, which the kubelet also sizes the pod's
 * cgroup by: the launcher makes it the VM cgroup's CPU weight, so under
 * contention VMs share the CPU in proportion to what the scheduler counted.
 */
export const podCpuRequestMillicores = (pod: V1Pod): number => podRequests(pod).get('cpu') ?? 0;

/** Extended resources (a domain other than kubernetes.io): those the node does not list are not the node's to judge. */
const isExtended = (name: string) => name.includes('/') && !name.split('/')[0]!.endsWith('kubernetes.io');
const isScalar = (name: string) => isExtended(name) || name.startsWith('hugepages-');
/** The order the scheduler checks them in; the kubelet reports the first that fails. */
const NATIVE = ['cpu', 'memory', 'ephemeral-storage'];

/**
 * Why the node refuses `pod` beside `admitted` (the pods it admitted that are not terminal), given its
 * allocatable as its status reports it; undefined when the pod fits.
 */
export function fitRefusal(pod: V1Pod, admitted: readonly V1Pod[], allocatable: Record<string, string>): FitRefusal | undefined {
  const capacity = (name: string) => amount(name, allocatable[name] ?? '0');
  const refuse = (name: string, requested: number, used: number, cap: number): FitRefusal => ({
    reason: `OutOf${name}`,
    message: `Node didn't have enough resource: ${name}, requested: ${requested}, used: ${used}, capacity: ${cap}`,
  });
  if (admitted.length + 1 > capacity('pods')) return refuse('pods', 1, admitted.length, capacity('pods'));
  const wanted = podRequests(pod);
  const used: Requests = new Map();
  for (const other of admitted) for (const [name, v] of podRequests(other)) used.set(name, (used.get(name) ?? 0) + v);
  const scalar = [...wanted.keys()].filter((name) => isScalar(name) && !(isExtended(name) && !(name in allocatable))).sort();
  for (const name of [...NATIVE, ...scalar]) {
    const requested = wanted.get(name) ?? 0;
    const inUse = used.get(name) ?? 0;
    if (requested > 0 && requested > capacity(name) - inUse) return refuse(name, requested, inUse, capacity(name));
  }
  return undefined;
}

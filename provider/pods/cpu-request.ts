// A pod's CPU request as the kubelet sizes the pod's cgroup from it
// (resourcehelper.PodRequests): the containers' requests summed, or the
// largest init container's if more, plus the pod overhead. The launcher turns
// it into the VM cgroup's CPU weight, so under contention VMs share the CPU in
// proportion to what the scheduler accounted them. Pure.
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { parseQuantity } from '../kube/quantity.js';

/** A quantity in millicores, rounded up as Quantity.MilliValue does; 0 when absent or unusable (translation reports those). */
function millicores(raw: unknown): number {
  const cores = raw === undefined || raw === null ? null : parseQuantity(String(raw));
  // toFixed: 0.1 * 1000 is 100.00000000000001, which must stay 100.
  return cores === null || cores <= 0 ? 0 : Math.ceil(Number((cores * 1000).toFixed(6)));
}

const requested = (c: V1Container): number => millicores(c.resources?.requests?.cpu);

export function podCpuRequestMillicores(pod: V1Pod): number {
  const containers = (pod.spec?.containers ?? []).reduce((sum, c) => sum + requested(c), 0);
  const init = Math.max(0, ...(pod.spec?.initContainers ?? []).map(requested));
  return Math.max(containers, init) + millicores(pod.spec?.overhead?.cpu);
}

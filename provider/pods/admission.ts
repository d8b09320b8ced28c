// Whether the node takes a new pod, as the kubelet's eviction manager admits
// pods (pkg/kubelet/eviction/eviction_manager.go, Admit): under disk or PID
// pressure no new pod, under memory pressure alone no new BestEffort pod
// that does not tolerate the memory-pressure taint; critical pods always.
// The kubelet then fails the pod with reason Evicted and the message "Pod was
// rejected: The node had condition: [DiskPressure]. ". Pure.
import type { V1Pod } from '@kubernetes/client-node';
import type { PressureCondition } from '../node/status.js';

/** system-cluster-critical and above: the kubelet's IsCriticalPod. */
const CRITICAL_PRIORITY = 2_000_000_000;
const MEMORY_PRESSURE_TAINT = 'node.kubernetes.io/memory-pressure';

function bestEffort(pod: V1Pod): boolean {
  return (pod.spec?.containers ?? []).every((c) => {
    const named = { ...c.resources?.requests, ...c.resources?.limits };
    return !named.cpu && !named.memory;
  });
}

function toleratesMemoryPressure(pod: V1Pod): boolean {
  return (pod.spec?.tolerations ?? []).some(
    (t) => (t.key === MEMORY_PRESSURE_TAINT || (!t.key && t.operator === 'Exists')) && (!t.effect || t.effect === 'NoSchedule'),
  );
}

/** The kubelet's rejection message for this pod under these conditions; undefined when the node admits it. */
export function admissionRefusal(pod: V1Pod, pressure: readonly PressureCondition[]): string | undefined {
  if (pressure.length === 0 || (pod.spec?.priority ?? 0) >= CRITICAL_PRIORITY) return undefined;
  if (pressure.length === 1 && pressure[0] === 'MemoryPressure' && (!bestEffort(pod) || toleratesMemoryPressure(pod))) return undefined;
  // Go's %v of the condition list: [DiskPressure PIDPressure].
  return `Pod was rejected: The node had condition: [${pressure.join(' ')}]. `;
}

// Whether a container has a log to read yet, as the kubelet decides it
// (validateContainerLogStatus, pkg/kubelet/kubelet_pods.go), which answers
// 400 with the container's state rather than a bare 404: `kubectl logs` of a
// VM that never started then says why.
import type { V1Pod } from '@kubernetes/client-node';

/** The kubelet's sentence for a container with no log to read, or undefined when it may have one. */
export function containerLogRefusal(pod: V1Pod, container: string, previous: boolean): string | undefined {
  const name = pod.metadata?.name ?? '';
  const status = pod.status?.containerStatuses?.find((s) => s.name === container);
  if (!status) return `container "${container}" in pod "${name}" is not available`;
  const lastTerminated = status.lastState?.terminated;
  if (previous) return lastTerminated ? undefined : `previous terminated container "${container}" in pod "${name}" not found`;
  const waiting = status.state?.waiting;
  if (!waiting || lastTerminated || status.state?.running || status.state?.terminated) return undefined;
  const why =
    waiting.reason === 'ErrImagePull'
      ? "image can't be pulled"
      : waiting.reason === 'ImagePullBackOff'
        ? 'trying and failing to pull image'
        : (waiting.reason ?? 'no logs yet');
  return `container "${container}" in pod "${name}" is waiting to start: ${why}`;
}

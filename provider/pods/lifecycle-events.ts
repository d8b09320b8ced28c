// The Events a pod's lifecycle records when it enters a state in which its
// VM does not run: what kubectl describe shows a user as the reason.
import type { V1Pod } from '@kubernetes/client-node';
import type { EventRecorder } from '../kube/events.js';
import type { LifecycleEvent, LifecycleState } from './lifecycle.js';
import { vmiReferenceOf } from './vmi-source.js';

/** The Events of entering a state in which the VM does not run, saying why. */
export function recordEntered(events: EventRecorder, pod: V1Pod, state: LifecycleState, event: LifecycleEvent): void {
  if (state.kind === 'Invalid') {
    events.record(pod, 'Warning', 'Failed', `cannot run this pod as a VM: ${state.message}`);
    // A launcher pod's VMI too: KubeVirt users look there.
    const vmi = vmiReferenceOf(pod);
    if (vmi) events.recordFor(vmi, 'Warning', 'SyncFailed', state.message);
  } else if (state.kind === 'Evicted') {
    // The kubelet's eviction or rejection event: its reason (Evicted, OutOfmemory...), its message.
    const reason = state.reason ?? 'Evicted';
    events.record(pod, 'Warning', reason, state.message);
    const vmi = vmiReferenceOf(pod);
    if (vmi) events.recordFor(vmi, 'Warning', reason, state.message);
  } else if (state.kind === 'ImageBackOff') {
    // The message names the image already: the pull's own words, or the missing boot image's.
    events.record(pod, 'Warning', 'Failed', state.error.message);
  } else if (state.kind === 'BackingOff' && event.type === 'ended') {
    events.record(
      pod,
      'Warning',
      'BackOff',
      `Back-off ${Math.round(state.delayMs / 1000)}s restarting stopped VM (${event.vm?.reason ?? 'stopped'})`,
    );
  }
}

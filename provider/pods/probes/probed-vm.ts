// Which VM the prober should be probing for a pod, from what the pod
// controller knows: a VM whose launcher reports it Running, its probes (the
// VMI's, learnt when its spec was translated, or the pod's container's), its
// address and its guest agent. Pure.
import type { V1Pod } from '@kubernetes/client-node';
import type { LauncherView } from '../../launchers/registry.js';
import type { PodLifecycle } from '../lifecycle.js';
import { vmiOwner } from '../vmi-source.js';
import { probesOf } from './probe-spec.js';
import type { ProbedVm } from './prober.js';
import type { GuestAgent } from './run-probe.js';

export function probedVmOf(pod: V1Pod, lc: PodLifecycle, view: LauncherView<unknown> | undefined, guest: GuestAgent): ProbedVm | undefined {
  if (!view?.live || view.state.phase !== 'Running' || pod.metadata?.deletionTimestamp) return undefined;
  const probes = vmiOwner(pod) ? (lc.vmi?.probes ?? {}) : probesOf(pod.spec?.containers[0]);
  if (Object.keys(probes).length === 0) return undefined;
  return {
    uid: lc.uid,
    key: lc.key,
    pod,
    run: String(view.state.startedAtUnixMs),
    ...(lc.attachment ? { podIP: lc.attachment.podIP } : {}),
    guest,
    probes,
  };
}

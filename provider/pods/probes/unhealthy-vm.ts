// A VM whose liveness or startup probe failed is killed as failed, as the
// kubelet kills such a container: its run ends Failed with the probe's
// message, and its owner decides what follows (the pod's restartPolicy; for
// a VMI, whose pod never restarts, the VM's runStrategy).
import type { V1Pod } from '@kubernetes/client-node';
import type { EventRecorder } from '../../kube/events.js';
import type { Launchers, VmControl } from '../../launchers/registry.js';
import type { Logger } from '../../log.js';
import type { ProbedVm } from './prober.js';

export interface UnhealthyVmOptions {
  launchers: Pick<Launchers<VmControl>, 'get'>;
  events: Pick<EventRecorder, 'record'>;
  log: Logger;
}

const REASON = { liveness: 'LivenessProbeFailed', startup: 'StartupProbeFailed' } as const;

export async function killUnhealthyVm(o: UnhealthyVmOptions, vm: ProbedVm, kind: 'liveness' | 'startup', message: string): Promise<void> {
  const view = o.launchers.get(vm.uid);
  if (!view?.live) return;
  const pod: V1Pod = vm.pod;
  o.events.record(pod, 'Normal', 'Killing', `VM failed its ${kind} probe; killing it (${message})`);
  o.log.info({ pod: vm.key, vm: vm.uid, probe: kind, message }, 'killing the VM: its probe failed');
  try {
    await view.client.kill({ reason: REASON[kind], message });
  } catch (err) {
    // The launcher went meanwhile (the VM ended by itself): its end is reported as it is.
    o.log.warn({ err, pod: vm.key, vm: vm.uid }, 'could not kill the VM for its failed probe');
  }
}

// The node's check that a VMI's launcher pod was charged for the VM it is
// about to run: the scheduler and quota saw the pod's memory request, which
// the VMI controller sized from the VMI (controllers/launcher-pod.ts), but
// the node realizes the VMI's current spec. Admission keeps the two in step
// (deploy/kubevirt-admission.yaml); this refuses a pod that falls short
// anyway, such as one made while those policies were not installed.
import type { V1Pod } from '@kubernetes/client-node';
import { launcherMemoryRequestMiB } from '../controllers/launcher-pod.js';
import { parseQuantity } from '../kube/quantity.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';
import { SpecError } from '../../vmm/errors.js';

const MIB = 2 ** 20;

/**
 * A SpecError at the pod's memory request when it is below what the VMI
 * controller requests for this VMI on a KVM node (the smaller of its two
 * sizes, so a pod sized for TCG passes on either), else undefined.
 */
export function undersizedLauncherPod(pod: V1Pod, vmi: VirtualMachineInstance): SpecError | undefined {
  const neededMiB = launcherMemoryRequestMiB(vmi, 'kvm');
  const requestedBytes = (pod.spec?.containers ?? []).reduce((sum, c) => {
    const raw = c.resources?.requests?.memory;
    return sum + (raw == null ? 0 : (parseQuantity(String(raw)) ?? 0));
  }, 0);
  if (requestedBytes >= neededMiB * MIB) return undefined;
  return new SpecError([
    {
      path: 'spec.containers[0].resources.requests.memory',
      reason: 'FieldValueInvalid',
      message:
        `the launcher pod requests ${Math.floor(requestedBytes / MIB)}Mi of memory, less than its VirtualMachineInstance ` +
        `${vmi.metadata.name} needs (${neededMiB}Mi: guest memory plus overhead, as the VMI controller sizes it); ` +
        'the VMI changed after the pod was made, or the VMI controller did not make the pod',
    },
  ]);
}

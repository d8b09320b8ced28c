// Test support: the VMI half of VmAccess for kubelet API fakes that serve no VMI.
import { NotFoundError } from '../../provider/kubelet-api/errors.js';
import type { VmAccess } from '../../provider/kubelet-api/vm-access.js';

const none = (): never => {
  throw new NotFoundError('no virtualmachineinstance on this node');
};

export const noVmis: Pick<VmAccess, 'vmiPod' | 'guestUsers' | 'guestFilesystems' | 'guestInfo' | 'softReboot'> = {
  vmiPod: none,
  guestUsers: async () => none(),
  guestFilesystems: async () => none(),
  guestInfo: async () => none(),
  softReboot: async () => none(),
};

// Where a VMI's PersistentVolumeClaim puts its bytes on this node: a local or
// hostPath PersistentVolume is a path the launcher opens; any other volume
// (CSI, NFS, iSCSI, ...) needs a volume plugin's node side, which vkvm does
// not run yet, so a VMI naming one is refused at the claim's field rather than
// left waiting with the reason in a log.
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { BoundClaim, UnservableClaim } from './draft.js';

/** A bound claim and its PV as this node can use them; the caller has checked that the claim is bound to `pv`. */
export function claimOnNode(pvc: V1PersistentVolumeClaim, pv: V1PersistentVolume): BoundClaim | UnservableClaim {
  const name = pv.metadata?.name ?? pvc.spec?.volumeName ?? '';
  const hostPath = pv.spec?.local?.path ?? pv.spec?.hostPath?.path;
  if (!hostPath) {
    const csi = pv.spec?.csi?.driver;
    const what = csi ? `a CSI volume of driver ${csi}` : 'neither local nor hostPath';
    return {
      unservable: `claim "${pvc.metadata?.name ?? ''}" is bound to PersistentVolume ${name}, ${what}: vkvm serves VM disks from local and hostPath volumes only`,
    };
  }
  const capacity = pvc.status?.capacity?.storage;
  return { hostPath, volumeMode: pv.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem', ...(capacity ? { capacity } : {}) };
}

// Where a VMI's PersistentVolumeClaim puts its bytes on this node: a local or
// hostPath PersistentVolume is a path the launcher opens; a CSI one is
// staged and published by the node agent (provider/csi-node/) at a path the
// caller names; any other volume (NFS, iSCSI, ...) needs an in-tree volume
// plugin vkvm does not have, so a VMI naming one is refused at the claim's
// field rather than left waiting with the reason in a log.
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { accessModeOf, type CsiVolume, type SecretRef } from '../csi-node/volume.js';
import type { BoundClaim, UnservableClaim } from './draft.js';

const secretRef = (ref: { name?: string; namespace?: string } | undefined): SecretRef | undefined =>
  ref?.name ? { name: ref.name, namespace: ref.namespace ?? 'default' } : undefined;

/** A CSI PersistentVolume as the node side stages and publishes it. */
export function csiVolumeOf(pv: V1PersistentVolume): CsiVolume | undefined {
  const csi = pv.spec?.csi;
  if (!csi) return undefined;
  const stageSecret = secretRef(csi.nodeStageSecretRef);
  const publishSecret = secretRef(csi.nodePublishSecretRef);
  const volumeMode = pv.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem';
  return {
    pvName: pv.metadata?.name ?? '',
    driver: csi.driver,
    volumeHandle: csi.volumeHandle,
    volumeAttributes: csi.volumeAttributes ?? {},
    volumeMode,
    ...(volumeMode === 'Filesystem' && csi.fsType ? { fsType: csi.fsType } : {}),
    accessMode: accessModeOf(pv.spec?.accessModes ?? []),
    readOnly: csi.readOnly === true,
    ...(stageSecret ? { nodeStageSecretRef: stageSecret } : {}),
    ...(publishSecret ? { nodePublishSecretRef: publishSecret } : {}),
  };
}

/**
 * A bound claim and its PV as this node can use them; the caller has checked
 * that the claim is bound to `pv`. `csiDiskPath` names where a CSI volume's
 * disk will be once published for the pod.
 */
export function claimOnNode(
  pvc: V1PersistentVolumeClaim,
  pv: V1PersistentVolume,
  csiDiskPath: (v: CsiVolume) => string,
): BoundClaim | UnservableClaim {
  const name = pv.metadata?.name ?? pvc.spec?.volumeName ?? '';
  const capacity = pvc.status?.capacity?.storage;
  const sized = capacity ? { capacity } : {};
  const volumeMode = pv.spec?.volumeMode === 'Block' ? 'Block' : 'Filesystem';
  const hostPath = pv.spec?.local?.path ?? pv.spec?.hostPath?.path;
  if (hostPath) return { kind: 'hostPath', hostPath, volumeMode, ...sized };
  const csi = csiVolumeOf(pv);
  if (csi) {
    if (!csi.driver || !csi.volumeHandle)
      return { unservable: `PersistentVolume ${name} names no CSI driver or volumeHandle (spec.csi.driver, spec.csi.volumeHandle)` };
    return { kind: 'csi', volume: csi, diskPath: csiDiskPath(csi), volumeMode, ...sized };
  }
  return {
    unservable: `claim "${pvc.metadata?.name ?? ''}" is bound to PersistentVolume ${name}, neither local, hostPath nor CSI: vkvm serves VM disks from those only`,
  };
}

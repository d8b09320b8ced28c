// A CSI volume as a pod on this node uses it (what the kubelet's CSI plugin
// reads from the PersistentVolume), and where it lives on the node: the
// kubelet's own layout, under the agent's state directory, so a reader who
// knows the kubelet finds each mount where they expect it. Pure.
//
//   plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount   staged (Filesystem)
//   plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/vol_data.json what was staged
//   plugins/kubernetes.io/csi/volumeDevices/staging/<pv>              staged (Block)
//   pods/<uid>/volumes/kubernetes.io~csi/<pv>/vol_data.json           what the pod published
//   pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount                   published (Filesystem)
//   pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>                   published (Block: the device)
import { createHash } from 'node:crypto';
import { join } from 'node:path';

/** CSI's access modes the node side asks for (csi.proto VolumeCapability.AccessMode.Mode). */
export type CsiAccessMode = 'SINGLE_NODE_WRITER' | 'SINGLE_NODE_READER_ONLY' | 'MULTI_NODE_READER_ONLY' | 'MULTI_NODE_MULTI_WRITER';

export interface SecretRef {
  namespace: string;
  name: string;
}

/** A claim's CSI PersistentVolume, as staging and publishing need it. */
export interface CsiVolume {
  pvName: string;
  driver: string;
  volumeHandle: string;
  volumeAttributes: Record<string, string>;
  volumeMode: 'Filesystem' | 'Block';
  /** Filesystem mode only; the driver's default when absent. */
  fsType?: string;
  accessMode: CsiAccessMode;
  /** The PV's or the claim reference's read-only. */
  readOnly: boolean;
  nodeStageSecretRef?: SecretRef;
  nodePublishSecretRef?: SecretRef;
}

/** What a volume's records on disk say (vol_data.json): enough to unpublish and unstage after a crash. */
export interface VolumeRecord {
  pvName: string;
  driver: string;
  volumeHandle: string;
  volumeMode: 'Filesystem' | 'Block';
  /** Where it was staged; absent when the driver does not stage. */
  stagingPath?: string;
}

export const RECORD_FILE = 'vol_data.json';

/** The kubelet's EscapeQualifiedName: a driver name as one path component. */
const escaped = (name: string): string => name.replaceAll('/', '~');

export function csiPluginDir(root: string): string {
  return join(root, 'plugins', 'kubernetes.io', 'csi');
}

/** The directory of a staged Filesystem volume (its globalmount and record). */
export function stagingDir(root: string, driver: string, volumeHandle: string): string {
  return join(csiPluginDir(root), escaped(driver), createHash('sha256').update(volumeHandle).digest('hex'));
}

/** Where the driver stages the volume. */
export function stagingPath(root: string, v: Pick<CsiVolume, 'driver' | 'volumeHandle' | 'volumeMode' | 'pvName'>): string {
  return v.volumeMode === 'Block'
    ? join(csiPluginDir(root), 'volumeDevices', 'staging', v.pvName)
    : join(stagingDir(root, v.driver, v.volumeHandle), 'globalmount');
}

/** Where a staging's record lives (beside a Filesystem globalmount; beside a Block staging dir). */
export function stagingRecordPath(root: string, v: Pick<CsiVolume, 'driver' | 'volumeHandle' | 'volumeMode' | 'pvName'>): string {
  return v.volumeMode === 'Block'
    ? join(csiPluginDir(root), 'volumeDevices', 'staging', `${v.pvName}.${RECORD_FILE}`)
    : join(stagingDir(root, v.driver, v.volumeHandle), RECORD_FILE);
}

export function podVolumesDir(root: string, podUid: string): string {
  return join(root, 'pods', podUid, 'volumes', 'kubernetes.io~csi');
}

export function podDevicesDir(root: string, podUid: string): string {
  return join(root, 'pods', podUid, 'volumeDevices', 'kubernetes.io~csi');
}

/** The pod's record of a publication. */
export function publishRecordPath(root: string, podUid: string, pvName: string): string {
  return join(podVolumesDir(root, podUid), pvName, RECORD_FILE);
}

/** Where the driver publishes the volume for the pod: a directory (Filesystem) or a device file (Block). */
export function publishPath(root: string, podUid: string, v: Pick<CsiVolume, 'volumeMode' | 'pvName'>): string {
  return v.volumeMode === 'Block' ? join(podDevicesDir(root, podUid), v.pvName) : join(podVolumesDir(root, podUid), v.pvName, 'mount');
}

/** The disk QEMU opens: the device, or KubeVirt's disk.img inside the published filesystem. */
export function diskPath(root: string, podUid: string, v: Pick<CsiVolume, 'volumeMode' | 'pvName'>): string {
  const published = publishPath(root, podUid, v);
  return v.volumeMode === 'Block' ? published : join(published, 'disk.img');
}

/** The VolumeAttachment the attach/detach controller makes for the volume on the node (the kubelet's getAttachmentName). */
export function volumeAttachmentName(volumeHandle: string, driver: string, nodeName: string): string {
  return `csi-${createHash('sha256').update(`${volumeHandle}${driver}${nodeName}`).digest('hex')}`;
}

/**
 * The CSI access mode of a PV's access modes, as the kubelet maps them for a
 * driver without SINGLE_NODE_MULTI_WRITER: many nodes only when the PV allows
 * no single-node mode.
 */
export function accessModeOf(pvAccessModes: readonly string[]): CsiAccessMode {
  if (pvAccessModes.includes('ReadWriteMany')) return 'MULTI_NODE_MULTI_WRITER';
  const singleNode = pvAccessModes.includes('ReadWriteOnce') || pvAccessModes.includes('ReadWriteOncePod');
  return pvAccessModes.includes('ReadOnlyMany') && !singleNode ? 'MULTI_NODE_READER_ONLY' : 'SINGLE_NODE_WRITER';
}

/** The capability a stage or publish call carries. */
export function volumeCapability(v: Pick<CsiVolume, 'volumeMode' | 'fsType' | 'accessMode'>): object {
  return {
    ...(v.volumeMode === 'Block' ? { block: {} } : { mount: { fsType: v.fsType ?? '', mountFlags: [] } }),
    accessMode: { mode: v.accessMode },
  };
}

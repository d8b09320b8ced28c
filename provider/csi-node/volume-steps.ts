// The per-volume lifecycle of the CSI node side, as the kubelet's operation
// executor runs it, in one place: what to do, in order, to bring a pod's
// volume up (wait for attach, stage, publish) and down (unpublish, then
// unstage once no pod on the node publishes it). Every step is idempotent, and
// each record is written before the call it describes, so a crash anywhere
// leaves records that the next teardown follows to undo what was done. Pure.
import {
  publishPath,
  publishRecordPath,
  stagingPath,
  stagingRecordPath,
  volumeAttachmentName,
  type CsiVolume,
  type VolumeRecord,
} from './volume.js';

/** What the node knows of the volume's driver. */
export interface DriverTraits {
  /** The CSIDriver's attachRequired (no CSIDriver object: true, as the kubelet takes it). */
  attachRequired: boolean;
  /** The driver offers STAGE_UNSTAGE_VOLUME. */
  stages: boolean;
}

export type UpStep =
  | { kind: 'waitAttached'; attachment: string }
  | { kind: 'recordStaging'; path: string; record: VolumeRecord }
  | { kind: 'stage'; stagingPath: string }
  | { kind: 'recordPublication'; path: string; record: PublicationRecord }
  | { kind: 'publish'; targetPath: string; stagingPath?: string };

/** A pod's record of a publication: where, and what to unstage after. */
export interface PublicationRecord extends VolumeRecord {
  podUid: string;
  targetPath: string;
}

export function upSteps(root: string, nodeName: string, podUid: string, v: CsiVolume, traits: DriverTraits): UpStep[] {
  const staged = traits.stages ? stagingPath(root, v) : undefined;
  const record: VolumeRecord = {
    pvName: v.pvName,
    driver: v.driver,
    volumeHandle: v.volumeHandle,
    volumeMode: v.volumeMode,
    ...(staged ? { stagingPath: staged } : {}),
  };
  const targetPath = publishPath(root, podUid, v);
  return [
    ...(traits.attachRequired
      ? [{ kind: 'waitAttached' as const, attachment: volumeAttachmentName(v.volumeHandle, v.driver, nodeName) }]
      : []),
    ...(staged
      ? [
          { kind: 'recordStaging' as const, path: stagingRecordPath(root, v), record },
          { kind: 'stage' as const, stagingPath: staged },
        ]
      : []),
    { kind: 'recordPublication', path: publishRecordPath(root, podUid, v.pvName), record: { ...record, podUid, targetPath } },
    { kind: 'publish', targetPath, ...(staged ? { stagingPath: staged } : {}) },
  ];
}

export type DownStep =
  | { kind: 'unpublish'; targetPath: string }
  | { kind: 'forgetPublication'; path: string; targetPath: string }
  | { kind: 'unstage'; stagingPath: string }
  | { kind: 'forgetStaging'; path: string; stagingPath: string };

/**
 * Taking one publication down. `others`: the publications of other pods on
 * the node, whose volume stays staged while any of them is of the same one.
 */
export function downSteps(root: string, pub: PublicationRecord, others: readonly PublicationRecord[]): DownStep[] {
  const steps: DownStep[] = [
    { kind: 'unpublish', targetPath: pub.targetPath },
    { kind: 'forgetPublication', path: publishRecordPath(root, pub.podUid, pub.pvName), targetPath: pub.targetPath },
  ];
  const shared = others.some((o) => o.podUid !== pub.podUid && o.driver === pub.driver && o.volumeHandle === pub.volumeHandle);
  if (pub.stagingPath && !shared) {
    steps.push(
      { kind: 'unstage', stagingPath: pub.stagingPath },
      { kind: 'forgetStaging', path: stagingRecordPath(root, pub), stagingPath: pub.stagingPath },
    );
  }
  return steps;
}

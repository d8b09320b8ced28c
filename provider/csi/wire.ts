// Records as CSI's wire messages (proto-loader's camelCase objects), and the
// request shapes the handlers read.
import type { Driver } from './driver.js';
import type { SnapshotRecord, VolumeRecord, WireCapability } from './records.js';

export interface WireRange {
  requiredBytes?: number;
  limitBytes?: number;
}
export interface WireContentSource {
  type?: 'snapshot' | 'volume';
  snapshot?: { snapshotId?: string } | null;
  volume?: { volumeId?: string } | null;
}
export interface WireTopologyRequirement {
  requisite?: Array<{ segments?: Record<string, string> }>;
  preferred?: Array<{ segments?: Record<string, string> }>;
}

export interface CreateVolumeRequest {
  name: string;
  capacityRange?: WireRange | null;
  volumeCapabilities?: WireCapability[];
  parameters?: Record<string, string>;
  volumeContentSource?: WireContentSource | null;
  accessibilityRequirements?: WireTopologyRequirement | null;
}

export function toWireVolume(d: Driver, v: VolumeRecord): object {
  return {
    volumeId: v.id,
    capacityBytes: v.sizeBytes,
    volumeContext: { 'vkvm.io/mode': v.mode },
    contentSource: v.source
      ? v.source.kind === 'snapshot'
        ? { snapshot: { snapshotId: v.source.id } }
        : { volume: { volumeId: v.source.id } }
      : null,
    accessibleTopology: [{ segments: d.topology }],
  };
}

export function toWireSnapshot(s: SnapshotRecord): object {
  return {
    snapshotId: s.id,
    sourceVolumeId: s.sourceVolumeId,
    sizeBytes: s.sizeBytes,
    creationTime: { seconds: Math.floor(s.createdAtMs / 1000), nanos: (s.createdAtMs % 1000) * 1e6 },
    readyToUse: true,
  };
}

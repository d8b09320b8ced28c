// A published CSI volume's usage as the kubelet reports it: NodeGetVolumeStats'
// answer shaped into the Summary API's VolumeStats
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1: FsStats inline, name, pvcRef), and
// into the kubelet's kubelet_volume_stats_* gauges. Pure.

/** The claim a volume is bound to (the Summary API's PVCReference). */
export interface PvcRef {
  name: string;
  namespace: string;
}

/** One volume of a pod in the stats summary; figures the driver did not give are absent, as the kubelet omits them. */
export interface VolumeStats {
  time: string;
  /** The pod's volume name. */
  name: string;
  pvcRef?: PvcRef;
  capacityBytes?: number;
  usedBytes?: number;
  availableBytes?: number;
  inodes?: number;
  inodesUsed?: number;
  inodesFree?: number;
}

/** csi.proto's VolumeUsage, as the node side's loader gives it (int64 as number, enums by name). */
export interface CsiVolumeUsage {
  unit?: string;
  total?: number | string;
  available?: number | string;
  used?: number | string;
}

/** A figure the driver left unset is 0 on the wire; the kubelet takes 0 for unknown too, and reports what it got. */
const figure = (n: number | string | undefined): number => Number(n ?? 0);

/** The summary's entry for one volume from the driver's usage (BYTES, and INODES for a filesystem). */
export function volumeStatsOf(usage: readonly CsiVolumeUsage[], at: { name: string; pvcRef?: PvcRef; time: string }): VolumeStats {
  const bytes = usage.find((u) => u.unit === 'BYTES');
  const inodes = usage.find((u) => u.unit === 'INODES');
  return {
    time: at.time,
    name: at.name,
    ...(at.pvcRef ? { pvcRef: at.pvcRef } : {}),
    ...(bytes ? { capacityBytes: figure(bytes.total), usedBytes: figure(bytes.used), availableBytes: figure(bytes.available) } : {}),
    ...(inodes ? { inodes: figure(inodes.total), inodesUsed: figure(inodes.used), inodesFree: figure(inodes.available) } : {}),
  };
}

/**
 * The pod's name for the volume of a claim: its volume that names the claim
 * (the launcher pod's copy of the VMI's volume), else the PV's name.
 */
export function podVolumeName(
  podVolumes: readonly { name: string; persistentVolumeClaim?: { claimName: string } }[],
  claim: string | undefined,
  pvName: string,
): string {
  return podVolumes.find((v) => claim !== undefined && v.persistentVolumeClaim?.claimName === claim)?.name ?? pvName;
}

/** The kubelet's volume gauges (pkg/kubelet/metrics/collectors/volume_stats.go), by the VolumeStats field each reads. */
export const VOLUME_GAUGES = [
  ['kubelet_volume_stats_capacity_bytes', 'capacityBytes', 'Capacity in bytes of the volume'],
  ['kubelet_volume_stats_available_bytes', 'availableBytes', 'Number of available bytes in the volume'],
  ['kubelet_volume_stats_used_bytes', 'usedBytes', 'Number of used bytes in the volume'],
  ['kubelet_volume_stats_inodes', 'inodes', 'Maximum number of inodes in the volume'],
  ['kubelet_volume_stats_inodes_free', 'inodesFree', 'Number of free inodes in the volume'],
  ['kubelet_volume_stats_inodes_used', 'inodesUsed', 'Number of used inodes in the volume'],
] as const;

export interface VolumeSample {
  metric: (typeof VOLUME_GAUGES)[number][0];
  labels: { namespace: string; persistentvolumeclaim: string };
  value: number;
}

/**
 * The gauges' samples: one per claim and figure the driver reported; a
 * volume of no claim has none, and a claim used by two pods on the node is
 * counted once, as the kubelet's collector does.
 */
export function volumeSamples(volumes: readonly VolumeStats[]): VolumeSample[] {
  const seen = new Set<string>();
  const samples: VolumeSample[] = [];
  for (const v of volumes) {
    if (!v.pvcRef) continue;
    const key = `${v.pvcRef.namespace}/${v.pvcRef.name}`;
    if (seen.has(key)) continue;
    seen.add(key);
    for (const [metric, field] of VOLUME_GAUGES) {
      const value = v[field];
      if (value !== undefined)
        samples.push({ metric, labels: { namespace: v.pvcRef.namespace, persistentvolumeclaim: v.pvcRef.name }, value });
    }
  }
  return samples;
}

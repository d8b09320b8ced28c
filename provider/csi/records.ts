// What the driver keeps about each volume and snapshot, and the pure rules
// over it: sizes from a capacity range, capacity left, capability checks,
// topology, and when a repeated CreateVolume names the same volume. The
// node side of a volume is a tagged union with its transitions in node.ts.
import { CsiError, invalid } from './errors.js';

export type VolumeMode = 'block' | 'filesystem';

/** The access modes one node can give: a volume lives on one node's disk. */
export const ACCESS_MODES = [
  'SINGLE_NODE_WRITER',
  'SINGLE_NODE_READER_ONLY',
  'SINGLE_NODE_SINGLE_WRITER',
  'SINGLE_NODE_MULTI_WRITER',
] as const;
export type AccessMode = (typeof ACCESS_MODES)[number];

/** Filesystems a filesystem-mode volume may be formatted with ('' means the default). */
export const FS_TYPES = ['ext4'] as const;
export const DEFAULT_FS_TYPE = 'ext4';

export interface VolumeSource {
  kind: 'snapshot' | 'volume';
  id: string;
}

/** ControllerPublishVolume's record: the one node a volume is attached to. */
export interface Attachment {
  nodeId: string;
  readonly: boolean;
  accessMode: AccessMode;
}

export interface Publication {
  targetPath: string;
  readonly: boolean;
  accessMode: AccessMode;
}

/** A volume's state on this node: staged means a loop device (and for filesystems, a mount at the staging path). */
export type NodeState =
  | { phase: 'unstaged' }
  | { phase: 'staged'; stagingPath: string; device: string; fsType: string; accessMode: AccessMode; publications: Publication[] };

export interface VolumeRecord {
  id: string;
  name: string;
  sizeBytes: number;
  mode: VolumeMode;
  source?: VolumeSource;
  createdAtMs: number;
  attachment?: Attachment;
  node: NodeState;
}

export interface SnapshotRecord {
  id: string;
  name: string;
  sourceVolumeId: string;
  /** The source's mode: a restore keeps it (a block volume's bytes are no filesystem to mount). */
  mode: VolumeMode;
  sizeBytes: number;
  createdAtMs: number;
}

/** The wire's VolumeCapability as proto-loader delivers it (oneofs named in accessType). */
export interface WireCapability {
  accessType?: 'mount' | 'block';
  mount?: { fsType?: string; mountFlags?: string[] } | null;
  block?: object | null;
  accessMode?: { mode?: string } | null;
}

export const MIB = 1024 * 1024;
export const GIB = 1024 * MIB;

/**
 * The size to make for a CapacityRange: `required` (or the default, within
 * `limit`) rounded up to whole MiB, which loop devices and filesystems take
 * as they are. OUT_OF_RANGE when the range leaves no such size.
 */
export function volumeSize(range: { requiredBytes?: number; limitBytes?: number } | null | undefined, defaultBytes: number): number {
  const required = range?.requiredBytes ?? 0;
  const limit = range?.limitBytes ?? 0;
  if (required < 0 || limit < 0) throw new CsiError('OUT_OF_RANGE', 'capacity_range: bytes must not be negative');
  if (limit && required > limit)
    throw new CsiError('OUT_OF_RANGE', `capacity_range: required_bytes ${required} exceeds limit_bytes ${limit}`);
  const wanted = required || (limit ? Math.min(defaultBytes, limit) : defaultBytes);
  const size = Math.max(MIB, Math.ceil(wanted / MIB) * MIB);
  if (limit && size > limit) throw new CsiError('OUT_OF_RANGE', `capacity_range: no whole MiB between ${required} and ${limit} bytes`);
  return size;
}

/** Bytes not yet promised: volumes and snapshots count at their full size, so a thin file never runs out under a guest. */
export function availableBytes(
  capacityBytes: number,
  volumes: Iterable<{ sizeBytes: number }>,
  snapshots: Iterable<{ sizeBytes: number }>,
  reservedBytes = 0,
): number {
  let used = reservedBytes;
  for (const v of volumes) used += v.sizeBytes;
  for (const s of snapshots) used += s.sizeBytes;
  return Math.max(0, capacityBytes - used);
}

/** Why one capability cannot be served, or undefined; `field` names it in the message. */
export function capabilityProblem(cap: WireCapability | null | undefined, field: string): string | undefined {
  if (!cap) return `${field}: missing`;
  if (cap.accessType !== 'mount' && cap.accessType !== 'block') return `${field}: access_type (block or mount) is required`;
  const mode = cap.accessMode?.mode;
  if (!mode || mode === 'UNKNOWN') return `${field}.access_mode: required`;
  if (!(ACCESS_MODES as readonly string[]).includes(mode))
    return `${field}.access_mode: ${mode} is not offered (a volume lives on one node)`;
  const fsType = cap.mount?.fsType ?? '';
  if (cap.accessType === 'mount' && fsType && !(FS_TYPES as readonly string[]).includes(fsType))
    return `${field}.mount.fs_type: ${fsType} is not offered (${FS_TYPES.join(', ')})`;
  return undefined;
}

/** The one volume mode all capabilities ask for; INVALID_ARGUMENT for none, a bad one or a mix. */
export function volumeModeOf(caps: readonly WireCapability[] | null | undefined, field = 'volume_capabilities'): VolumeMode {
  if (!caps?.length) throw invalid(field, 'at least one capability is required');
  caps.forEach((c, i) => {
    const problem = capabilityProblem(c, `${field}[${i}]`);
    if (problem) throw new CsiError('INVALID_ARGUMENT', problem);
  });
  const modes = new Set(caps.map((c) => (c.accessType === 'block' ? 'block' : 'filesystem')));
  if (modes.size > 1) throw invalid(field, 'asks for both block and mount access; a volume is one or the other');
  return [...modes][0] as VolumeMode;
}

export type Topology = Record<string, string>;

/** Whether a volume on a node with `ours` may be made under the request's requisite topologies (none: anywhere). */
export function topologyAllows(requisite: ReadonlyArray<{ segments?: Topology | null }> | null | undefined, ours: Topology): boolean {
  if (!requisite?.length) return true;
  return requisite.some((t) => Object.entries(t.segments ?? {}).every(([k, v]) => ours[k] === v));
}

/**
 * Whether an existing volume answers a repeated CreateVolume (same name):
 * the same mode and source, and a size within the range. CreateVolume is
 * idempotent by name; anything else is ALREADY_EXISTS.
 */
export function sameVolume(
  v: VolumeRecord,
  want: { mode: VolumeMode; source?: VolumeSource; requiredBytes: number; limitBytes: number },
): boolean {
  return (
    v.mode === want.mode &&
    v.source?.kind === want.source?.kind &&
    v.source?.id === want.source?.id &&
    v.sizeBytes >= want.requiredBytes &&
    (!want.limitBytes || v.sizeBytes <= want.limitBytes)
  );
}

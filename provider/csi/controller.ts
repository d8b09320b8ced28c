// The Controller service's volume calls. A volume is a file on this node
// (volumes/<id>.img); everything here is idempotent by name or ID, as the
// sidecars retry, and answers with the codes the CSI spec lists.
import { CsiError, invalid, notFound } from './errors.js';
import type { Driver } from './driver.js';
import { isSnapshotId, isVolumeId, newId, page } from './ids.js';
import {
  availableBytes,
  capabilityProblem,
  MIB,
  sameVolume,
  topologyAllows,
  volumeModeOf,
  volumeSize,
  type AccessMode,
  type VolumeRecord,
  type VolumeMode,
  type VolumeSource,
  type WireCapability,
} from './records.js';
import { detachLoops, frozenWhile } from './block-devices.js';
import { copyVolumeFile, createSparse, growFile, removeFile } from './volume-files.js';
import { toWireVolume, type CreateVolumeRequest, type WireContentSource, type WireRange } from './wire.js';

export const CONTROLLER_CAPABILITIES = [
  'CREATE_DELETE_VOLUME',
  'PUBLISH_UNPUBLISH_VOLUME',
  'LIST_VOLUMES',
  'GET_CAPACITY',
  'CREATE_DELETE_SNAPSHOT',
  'LIST_SNAPSHOTS',
  'CLONE_VOLUME',
  'PUBLISH_READONLY',
  'EXPAND_VOLUME',
  'LIST_VOLUMES_PUBLISHED_NODES',
  'SINGLE_NODE_MULTI_WRITER',
] as const;

function sourceOf(src: WireContentSource | null | undefined): VolumeSource | undefined {
  if (!src?.type) return undefined;
  if (src.type === 'snapshot') return { kind: 'snapshot', id: src.snapshot?.snapshotId ?? '' };
  return { kind: 'volume', id: src.volume?.volumeId ?? '' };
}

export function available(d: Driver): number {
  return availableBytes(d.config.capacityBytes, d.store.volumes.values(), d.store.snapshots.values(), d.reservedBytes.value);
}

export function requireVolume(d: Driver, id: string, field = 'volume_id'): VolumeRecord {
  if (!id) throw invalid(field, 'required');
  const v = isVolumeId(id) ? d.store.volumes.get(id) : undefined;
  if (!v) throw notFound(`volume ${id}`);
  return v;
}

export async function createVolume(d: Driver, req: CreateVolumeRequest): Promise<object> {
  if (!req.name) throw invalid('name', 'required');
  const mode = volumeModeOf(req.volumeCapabilities);
  const source = sourceOf(req.volumeContentSource);
  const range: WireRange = req.capacityRange ?? {};
  return d.locks.run([`name:${req.name}`, source?.id ?? ''], async () => {
    const existing = d.store.volumeByName(req.name);
    if (existing) {
      const want = { mode, requiredBytes: range.requiredBytes ?? 0, limitBytes: range.limitBytes ?? 0, ...(source ? { source } : {}) };
      if (!sameVolume(existing, want)) throw new CsiError('ALREADY_EXISTS', `volume ${req.name} exists with another size, mode or source`);
      return { volume: toWireVolume(d, existing) };
    }
    if (!topologyAllows(req.accessibilityRequirements?.requisite, d.topology))
      throw new CsiError(
        'RESOURCE_EXHAUSTED',
        `accessibility_requirements.requisite: this driver provisions only on node ${d.config.nodeId}`,
      );
    const sourceFile = source ? sourceFileOf(d, source, mode) : undefined;
    const sourceBytes = source ? sourceSize(d, source) : 0;
    const sizeBytes = Math.max(volumeSize(range, Math.max(d.config.defaultVolumeBytes, sourceBytes)), sourceBytes);
    if (range.limitBytes && sizeBytes > range.limitBytes)
      throw new CsiError('OUT_OF_RANGE', `capacity_range.limit_bytes: ${range.limitBytes} is below the source's ${sourceBytes} bytes`);
    if (sizeBytes > available(d))
      throw new CsiError('RESOURCE_EXHAUSTED', `${sizeBytes} bytes asked, ${available(d)} left in ${d.config.dir}`);
    const id = newId('volume');
    const file = d.store.volumeFile(id);
    d.reservedBytes.value += sizeBytes;
    try {
      if (sourceFile) await whileConsistent(d, source!, () => copyVolumeFile(sourceFile, file, sizeBytes));
      else await createSparse(file, sizeBytes);
      const v: VolumeRecord = {
        id,
        name: req.name,
        sizeBytes,
        mode,
        createdAtMs: Date.now(),
        node: { phase: 'unstaged' },
        ...(source ? { source } : {}),
      };
      await d.store.putVolume(v).catch(async (err: unknown) => {
        await removeFile(file);
        throw err;
      });
      d.log.info({ volume: id, name: req.name, sizeBytes, mode, source }, 'volume created');
      return { volume: toWireVolume(d, v) };
    } finally {
      d.reservedBytes.value -= sizeBytes;
    }
  });
}

/** The file a new `mode` volume copies; NOT_FOUND for a source that is gone, INVALID_ARGUMENT for one of the other mode. */
function sourceFileOf(d: Driver, source: VolumeSource, mode: VolumeMode): string {
  const field = `volume_content_source.${source.kind}`;
  const found =
    source.kind === 'snapshot'
      ? isSnapshotId(source.id) && d.store.snapshots.get(source.id)
      : isVolumeId(source.id) && d.store.volumes.get(source.id);
  if (!found) throw notFound(`${field} ${source.id}`);
  if (found.mode !== mode) throw invalid(field, `${source.id} is a ${found.mode} ${source.kind}; a ${mode} volume cannot be made from it`);
  return source.kind === 'snapshot' ? d.store.snapshotFile(source.id) : d.store.volumeFile(source.id);
}

/** Runs `copy` with a staged filesystem source frozen, so the copy is of a consistent filesystem. */
export async function whileConsistent<T>(d: Driver, source: VolumeSource, copy: () => Promise<T>): Promise<T> {
  const v = source.kind === 'volume' ? d.store.volumes.get(source.id) : undefined;
  const frozen = v?.mode === 'filesystem' && v.node.phase === 'staged' ? v.node.stagingPath : undefined;
  return frozenWhile(frozen, copy);
}

function sourceSize(d: Driver, source: VolumeSource): number {
  return (source.kind === 'snapshot' ? d.store.snapshots.get(source.id) : d.store.volumes.get(source.id))!.sizeBytes;
}

export async function deleteVolume(d: Driver, req: { volumeId: string }): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  // An ID this driver never made names no volume: deleting it is done already.
  if (!isVolumeId(req.volumeId)) return {};
  return d.locks.run([req.volumeId], async () => {
    const v = d.store.volumes.get(req.volumeId);
    if (!v) return {};
    if (v.attachment || v.node.phase !== 'unstaged')
      throw new CsiError('FAILED_PRECONDITION', `volume ${v.id} is in use (attached or staged); unpublish and unstage it first`);
    await d.store.deleteVolume(v.id);
    // A stage that failed half-way can leave a loop device over an unstaged volume: it goes with the file.
    await detachLoops(d.store.volumeFile(v.id));
    await removeFile(d.store.volumeFile(v.id));
    d.log.info({ volume: v.id, name: v.name }, 'volume deleted');
    return {};
  });
}

export function validateVolumeCapabilities(d: Driver, req: { volumeId: string; volumeCapabilities?: WireCapability[] }): object {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.volumeCapabilities?.length) throw invalid('volume_capabilities', 'at least one capability is required');
  const v = requireVolume(d, req.volumeId);
  const problems = req.volumeCapabilities.map((c, i) => capabilityProblem(c, `volume_capabilities[${i}]`)).filter(Boolean);
  const wrongMode = req.volumeCapabilities.some((c) => (c.accessType === 'block' ? 'block' : 'filesystem') !== v.mode);
  if (problems.length || wrongMode) return { message: problems.join('; ') || `volume ${v.id} is a ${v.mode} volume` };
  return { confirmed: { volumeCapabilities: req.volumeCapabilities } };
}

export function listVolumes(d: Driver, req: { maxEntries?: number; startingToken?: string }): object {
  const p = page([...d.store.volumes.keys()], 'volume', req.startingToken ?? '', req.maxEntries ?? 0);
  if (!p) throw new CsiError('ABORTED', `starting_token ${JSON.stringify(req.startingToken)} is not a token this driver gave`);
  return {
    entries: p.ids.map((id) => {
      const v = d.store.volumes.get(id)!;
      return { volume: toWireVolume(d, v), status: { publishedNodeIds: v.attachment ? [v.attachment.nodeId] : [] } };
    }),
    nextToken: p.nextToken,
  };
}

export function getCapacity(
  d: Driver,
  req: { volumeCapabilities?: WireCapability[]; accessibleTopology?: { segments?: Record<string, string> } | null },
): object {
  const servable = (req.volumeCapabilities ?? []).every((c, i) => !capabilityProblem(c, `volume_capabilities[${i}]`));
  const here = !req.accessibleTopology || topologyAllows([req.accessibleTopology], d.topology);
  const bytes = servable && here ? available(d) : 0;
  return { availableCapacity: bytes, maximumVolumeSize: { value: bytes }, minimumVolumeSize: { value: MIB } };
}

export async function controllerPublish(
  d: Driver,
  req: { volumeId: string; nodeId: string; volumeCapability?: WireCapability | null; readonly?: boolean },
): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.nodeId) throw invalid('node_id', 'required');
  const problem = capabilityProblem(req.volumeCapability, 'volume_capability');
  if (problem) throw new CsiError('INVALID_ARGUMENT', problem);
  return d.locks.run([req.volumeId], async () => {
    const v = requireVolume(d, req.volumeId);
    if (req.nodeId !== d.config.nodeId) throw notFound(`node ${req.nodeId} (volume ${v.id} lives on ${d.config.nodeId})`);
    const wanted = { nodeId: req.nodeId, readonly: !!req.readonly, accessMode: req.volumeCapability!.accessMode!.mode as AccessMode };
    if (v.attachment) {
      if (v.attachment.readonly !== wanted.readonly || v.attachment.accessMode !== wanted.accessMode)
        throw new CsiError('ALREADY_EXISTS', `volume ${v.id} is attached to ${v.attachment.nodeId} with another access mode or readonly`);
      return { publishContext: {} };
    }
    await d.store.putVolume({ ...v, attachment: wanted });
    return { publishContext: {} };
  });
}

export async function controllerUnpublish(d: Driver, req: { volumeId: string; nodeId?: string }): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  return d.locks.run([req.volumeId], async () => {
    // A volume that is gone is attached nowhere: done already (the attacher retries after a delete too).
    const v = isVolumeId(req.volumeId) ? d.store.volumes.get(req.volumeId) : undefined;
    if (!v) return {};
    if (req.nodeId && req.nodeId !== d.config.nodeId) throw notFound(`node ${req.nodeId}`);
    if (v.attachment) await d.store.putVolume({ ...v, attachment: undefined });
    return {};
  });
}

export async function controllerExpand(d: Driver, req: { volumeId: string; capacityRange?: WireRange | null }): Promise<object> {
  // Not offered in node mode (expansion.ts): the node that holds the file grows it.
  if (d.config.expansion === 'node')
    throw new CsiError('FAILED_PRECONDITION', 'this driver expands volumes on the node (--expansion=node)');
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.capacityRange) throw invalid('capacity_range', 'required');
  return d.locks.run([req.volumeId], async () => {
    const v = requireVolume(d, req.volumeId);
    const sizeBytes = volumeSize(req.capacityRange, v.sizeBytes);
    if (sizeBytes <= v.sizeBytes) return { capacityBytes: v.sizeBytes, nodeExpansionRequired: false };
    if (sizeBytes - v.sizeBytes > available(d))
      throw new CsiError('RESOURCE_EXHAUSTED', `${sizeBytes - v.sizeBytes} more bytes asked, ${available(d)} left`);
    await growFile(d.store.volumeFile(v.id), sizeBytes);
    await d.store.putVolume({ ...v, sizeBytes });
    d.log.info({ volume: v.id, sizeBytes }, 'volume expanded');
    // The node side makes the loop device (and the filesystem) take the new size.
    return { capacityBytes: sizeBytes, nodeExpansionRequired: true };
  });
}

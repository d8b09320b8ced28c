// The Controller service's snapshot calls. A snapshot is a copy of a volume's
// file (snapshots/<id>.img), copy-on-write where the filesystem allows;
// it outlives its source volume, and volumes are restored from it by
// CreateVolume with a snapshot source.
import { requireVolume, available, whileConsistent } from './controller.js';
import type { Driver } from './driver.js';
import { CsiError, invalid } from './errors.js';
import { isSnapshotId, newId, page } from './ids.js';
import type { SnapshotRecord } from './records.js';
import { copyVolumeFile, removeFile } from './volume-files.js';
import { toWireSnapshot } from './wire.js';

export async function createSnapshot(d: Driver, req: { name: string; sourceVolumeId: string }): Promise<object> {
  if (!req.name) throw invalid('name', 'required');
  if (!req.sourceVolumeId) throw invalid('source_volume_id', 'required');
  return d.locks.run([`snapshot-name:${req.name}`, req.sourceVolumeId], async () => {
    const existing = d.store.snapshotByName(req.name);
    if (existing) {
      if (existing.sourceVolumeId !== req.sourceVolumeId)
        throw new CsiError('ALREADY_EXISTS', `snapshot ${req.name} exists of another volume (${existing.sourceVolumeId})`);
      return { snapshot: toWireSnapshot(existing) };
    }
    const v = requireVolume(d, req.sourceVolumeId, 'source_volume_id');
    if (v.sizeBytes > available(d)) throw new CsiError('RESOURCE_EXHAUSTED', `${v.sizeBytes} bytes needed, ${available(d)} left`);
    const id = newId('snapshot');
    const file = d.store.snapshotFile(id);
    d.reservedBytes.value += v.sizeBytes;
    try {
      await whileConsistent(d, { kind: 'volume', id: v.id }, () => copyVolumeFile(d.store.volumeFile(v.id), file, v.sizeBytes));
      const s: SnapshotRecord = { id, name: req.name, sourceVolumeId: v.id, mode: v.mode, sizeBytes: v.sizeBytes, createdAtMs: Date.now() };
      await d.store.putSnapshot(s).catch(async (err: unknown) => {
        await removeFile(file);
        throw err;
      });
      d.log.info({ snapshot: id, name: req.name, volume: v.id }, 'snapshot created');
      return { snapshot: toWireSnapshot(s) };
    } finally {
      d.reservedBytes.value -= v.sizeBytes;
    }
  });
}

export async function deleteSnapshot(d: Driver, req: { snapshotId: string }): Promise<object> {
  if (!req.snapshotId) throw invalid('snapshot_id', 'required');
  if (!isSnapshotId(req.snapshotId)) return {};
  return d.locks.run([req.snapshotId], async () => {
    if (!d.store.snapshots.has(req.snapshotId)) return {};
    await d.store.deleteSnapshot(req.snapshotId);
    await removeFile(d.store.snapshotFile(req.snapshotId));
    d.log.info({ snapshot: req.snapshotId }, 'snapshot deleted');
    return {};
  });
}

export function listSnapshots(
  d: Driver,
  req: { maxEntries?: number; startingToken?: string; sourceVolumeId?: string; snapshotId?: string },
): object {
  const ids = [...d.store.snapshots.values()]
    .filter((s) => (!req.snapshotId || s.id === req.snapshotId) && (!req.sourceVolumeId || s.sourceVolumeId === req.sourceVolumeId))
    .map((s) => s.id);
  const p = page(ids, 'snapshot', req.startingToken ?? '', req.maxEntries ?? 0);
  if (!p) throw new CsiError('ABORTED', `starting_token ${JSON.stringify(req.startingToken)} is not a token this driver gave`);
  return { entries: p.ids.map((id) => ({ snapshot: toWireSnapshot(d.store.snapshots.get(id)!) })), nextToken: p.nextToken };
}

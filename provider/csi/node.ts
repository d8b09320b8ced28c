// The Node service: a volume's file becomes a loop device when staged (and,
// for a filesystem volume, a filesystem mounted at the staging path), and is
// bind-mounted at each target when published. Each call makes the node
// match what it asks and records it before answering, so a retry after a
// crash (or a host reboot, which drops loops and mounts) completes the work.
import { mkdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { available, requireVolume } from './controller.js';
import type { Driver } from './driver.js';
import * as dev from './block-devices.js';
import { CsiError, invalid, notFound } from './errors.js';
import { nodeFileGrowth } from './expansion.js';
import { growFile } from './volume-files.js';
import {
  capabilityProblem,
  DEFAULT_FS_TYPE,
  type AccessMode,
  type Publication,
  type VolumeRecord,
  type WireCapability,
} from './records.js';

export const NODE_CAPABILITIES = ['STAGE_UNSTAGE_VOLUME', 'GET_VOLUME_STATS', 'EXPAND_VOLUME', 'SINGLE_NODE_MULTI_WRITER'] as const;

function checkCapability(v: VolumeRecord, cap: WireCapability | null | undefined): AccessMode {
  const problem = capabilityProblem(cap, 'volume_capability');
  if (problem) throw new CsiError('INVALID_ARGUMENT', problem);
  if ((cap!.accessType === 'block' ? 'block' : 'filesystem') !== v.mode)
    throw invalid('volume_capability', `volume ${v.id} is a ${v.mode} volume, asked for ${cap!.accessType} access`);
  return cap!.accessMode!.mode as AccessMode;
}

export function nodeGetInfo(d: Driver): object {
  // No volume limit: loop devices are made on demand.
  return { nodeId: d.config.nodeId, maxVolumesPerNode: 0, accessibleTopology: { segments: d.topology } };
}

export async function nodeStage(
  d: Driver,
  req: { volumeId: string; stagingTargetPath: string; volumeCapability?: WireCapability | null },
): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.stagingTargetPath) throw invalid('staging_target_path', 'required');
  if (!req.volumeCapability) throw invalid('volume_capability', 'required');
  return d.locks.run([req.volumeId], async () => {
    const v = requireVolume(d, req.volumeId);
    const accessMode = checkCapability(v, req.volumeCapability);
    if (v.node.phase === 'staged' && v.node.stagingPath !== req.stagingTargetPath)
      throw new CsiError('FAILED_PRECONDITION', `volume ${v.id} is staged at ${v.node.stagingPath}`);
    if (v.node.phase === 'staged' && v.node.accessMode !== accessMode)
      throw new CsiError('ALREADY_EXISTS', `volume ${v.id} is staged with access mode ${v.node.accessMode}`);
    const readonly = accessMode === 'SINGLE_NODE_READER_ONLY';
    const file = d.store.volumeFile(v.id);
    const device = await dev.attachLoop(file, readonly);
    try {
      // A file that grew while unstaged (expanded, or cloned larger) shows its size to a loop found again.
      await dev.refreshLoop(device);
      const mount = req.volumeCapability!.mount;
      const fsType = mount?.fsType || DEFAULT_FS_TYPE;
      if (v.mode === 'filesystem' && !(await dev.isMountPoint(req.stagingTargetPath))) {
        if (await dev.hasFilesystem(device)) {
          if (!readonly) await dev.growFilesystemOffline(device);
        } else if (readonly) {
          throw new CsiError('FAILED_PRECONDITION', `volume ${v.id} has no filesystem yet: stage it writable once before read-only`);
        } else await dev.makeFilesystem(device, fsType);
        await dev.mountDevice(device, req.stagingTargetPath, fsType, mount?.mountFlags ?? [], readonly);
      }
      const publications = v.node.phase === 'staged' ? v.node.publications : [];
      await d.store.putVolume({
        ...v,
        node: { phase: 'staged', stagingPath: req.stagingTargetPath, device, fsType, accessMode, publications },
      });
    } catch (err) {
      // A first stage that failed half-way leaves nothing: no mount, no loop device the records do not name.
      if (v.node.phase === 'unstaged') await undoStage(d, v, req.stagingTargetPath);
      throw err;
    }
    return {};
  });
}

async function undoStage(d: Driver, v: VolumeRecord, stagingPath: string): Promise<void> {
  try {
    if (v.mode === 'filesystem' && (await dev.isMountPoint(stagingPath))) await dev.unmount(stagingPath);
    await dev.detachLoops(d.store.volumeFile(v.id));
  } catch (err) {
    d.log.warn({ err, volume: v.id }, 'undoing a failed stage failed: a loop device or mount may be left');
  }
}

export async function nodeUnstage(d: Driver, req: { volumeId: string; stagingTargetPath: string }): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.stagingTargetPath) throw invalid('staging_target_path', 'required');
  return d.locks.run([req.volumeId], async () => {
    const v = requireVolume(d, req.volumeId);
    if (v.node.phase !== 'staged' || v.node.stagingPath !== req.stagingTargetPath) return {};
    if (v.node.publications.length)
      throw new CsiError(
        'FAILED_PRECONDITION',
        `volume ${v.id} is still published at ${v.node.publications.map((p) => p.targetPath).join(', ')}`,
      );
    if (v.mode === 'filesystem' && (await dev.isMountPoint(req.stagingTargetPath))) await dev.unmount(req.stagingTargetPath);
    await dev.detachLoops(d.store.volumeFile(v.id));
    await d.store.putVolume({ ...v, node: { phase: 'unstaged' } });
    return {};
  });
}

export async function nodePublish(
  d: Driver,
  req: { volumeId: string; targetPath: string; stagingTargetPath: string; volumeCapability?: WireCapability | null; readonly?: boolean },
): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.targetPath) throw invalid('target_path', 'required');
  if (!req.volumeCapability) throw invalid('volume_capability', 'required');
  if (!req.stagingTargetPath) throw invalid('staging_target_path', 'required (the volume is staged first)');
  return d.locks.run([req.volumeId], async () => {
    const v = requireVolume(d, req.volumeId);
    const accessMode = checkCapability(v, req.volumeCapability);
    if (v.node.phase !== 'staged' || v.node.stagingPath !== req.stagingTargetPath)
      throw new CsiError('FAILED_PRECONDITION', `volume ${v.id} is not staged at ${req.stagingTargetPath}`);
    const wanted: Publication = {
      targetPath: req.targetPath,
      readonly: !!req.readonly || accessMode === 'SINGLE_NODE_READER_ONLY',
      accessMode,
    };
    const others = v.node.publications.filter((p) => p.targetPath !== req.targetPath);
    const same = v.node.publications.find((p) => p.targetPath === req.targetPath);
    if (same && (same.readonly !== wanted.readonly || same.accessMode !== wanted.accessMode))
      throw new CsiError('ALREADY_EXISTS', `volume ${v.id} is published at ${req.targetPath} with another access mode or readonly`);
    if (others.length && (accessMode === 'SINGLE_NODE_SINGLE_WRITER' || others.some((p) => p.accessMode === 'SINGLE_NODE_SINGLE_WRITER')))
      throw new CsiError('FAILED_PRECONDITION', `volume ${v.id} is single-writer and already published at ${others[0]!.targetPath}`);
    // Recorded before the mount: an unpublish after a crash in between still finds (and removes) it.
    const staged = v.node;
    if (!same) await d.store.putVolume({ ...v, node: { ...staged, publications: [...staged.publications, wanted] } });
    if (!(await dev.isMountPoint(req.targetPath))) {
      // The target is the driver's to make: a file for a device, a directory for a filesystem.
      if (v.mode === 'block') await writeFile(req.targetPath, '', { mode: 0o600, flag: 'a' });
      else await mkdir(req.targetPath, { recursive: true, mode: 0o750 });
      await dev.bindMount(v.mode === 'block' ? staged.device : staged.stagingPath, req.targetPath, wanted.readonly);
    }
    return {};
  });
}

export async function nodeUnpublish(d: Driver, req: { volumeId: string; targetPath: string }): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.targetPath) throw invalid('target_path', 'required');
  return d.locks.run([req.volumeId], async () => {
    const v = requireVolume(d, req.volumeId);
    // Not published there: done already (another volume's mount at that path is not this call's to touch).
    if (v.node.phase !== 'staged' || !v.node.publications.some((p) => p.targetPath === req.targetPath)) return {};
    if (await dev.isMountPoint(req.targetPath)) await dev.unmount(req.targetPath);
    if (v.mode === 'block') await rm(req.targetPath, { force: true });
    else await rmdir(req.targetPath).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? undefined : Promise.reject(err)));
    await d.store.putVolume({
      ...v,
      node: { ...v.node, publications: v.node.publications.filter((p) => p.targetPath !== req.targetPath) },
    });
    return {};
  });
}

function stagedPaths(v: VolumeRecord): string[] {
  return v.node.phase === 'staged' ? [v.node.stagingPath, ...v.node.publications.map((p) => p.targetPath)] : [];
}

export async function nodeGetVolumeStats(d: Driver, req: { volumeId: string; volumePath: string }): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.volumePath) throw invalid('volume_path', 'required');
  const v = requireVolume(d, req.volumeId);
  if (!stagedPaths(v).includes(req.volumePath)) throw notFound(`volume ${v.id} at ${req.volumePath}`);
  if (v.mode === 'block') return { usage: [{ unit: 'BYTES', total: v.sizeBytes }] };
  const u = await dev.filesystemUsage(req.volumePath);
  return {
    usage: [
      { unit: 'BYTES', total: u.totalBytes, available: u.availableBytes, used: u.usedBytes },
      { unit: 'INODES', total: u.totalInodes, available: u.freeInodes, used: u.totalInodes - u.freeInodes },
    ],
    volumeCondition: { abnormal: false, message: '' },
  };
}

export async function nodeExpand(
  d: Driver,
  req: { volumeId: string; volumePath: string; capacityRange?: { requiredBytes?: number; limitBytes?: number } | null },
): Promise<object> {
  if (!req.volumeId) throw invalid('volume_id', 'required');
  if (!req.volumePath) throw invalid('volume_path', 'required');
  return d.locks.run([req.volumeId], async () => {
    let v = requireVolume(d, req.volumeId);
    if (!stagedPaths(v).includes(req.volumePath)) throw notFound(`volume ${v.id} at ${req.volumePath}`);
    const growth = nodeFileGrowth(d.config.expansion, v, req.capacityRange, available(d));
    if (growth.kind === 'grow') {
      // The file first, then the record: a crash between leaves a file larger than its record, which a retry
      // grows to the same size (truncate is idempotent) and records.
      await growFile(d.store.volumeFile(v.id), growth.toBytes);
      v = { ...v, sizeBytes: growth.toBytes };
      await d.store.putVolume(v);
      d.log.info({ volume: v.id, sizeBytes: v.sizeBytes }, 'volume expanded on the node');
    }
    if (v.node.phase === 'staged') {
      await dev.refreshLoop(v.node.device);
      if (v.mode === 'filesystem' && v.node.accessMode !== 'SINGLE_NODE_READER_ONLY' && !(await dev.growFilesystemOnline(v.node.device)))
        d.log.warn({ volume: v.id }, 'online resize2fs refused (no CAP_SYS_RESOURCE); the filesystem grows at its next stage');
    }
    return { capacityBytes: v.sizeBytes };
  });
}

// Turns the spec's disks into files QEMU can open: a qcow2 overlay per VM on
// a host or downloaded base image, sparse empty disks, cloud-init seed ISOs,
// and host paths used in place. Idempotent, because the launcher's sync is:
// an overlay or empty disk that already exists holds the guest's data and is
// reused, never recreated. The VM's directory is its QEMU's, whose uid may
// put a link in place of any name there: files are made in a directory only
// root can write and renamed into place, and given to QEMU through an fd
// opened without following a link (no-follow.ts).
import { lchown, lstat, mkdir, mkdtemp, open, rename, rm, rmdir } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { buildNoCloudIso } from '../cloud-init/nocloud-iso.js';
import { SpecError } from '../errors.js';
import type { Log } from '../log.js';
import type { DiskSpec, VmSpec } from '../spec.js';
import type { PreparedDisk } from '../domain/runtime.js';
import { chownNoFollow, UnsafePathError } from '../no-follow.js';
import { statIfExists } from './fs.js';
import { baseFormat, downloadBase } from './base-image.js';
import type { DownloadPolicy } from './download-policy.js';
import { createEmptyDisk, createOverlay } from './qemu-img.js';
import { chooseDriverModes } from './driver-modes.js';
import { probeDiskFacts } from './direct-io.js';

export interface DiskDirs {
  /** This VM's own directory: overlays, empty disks and seed ISOs go here. */
  vmDir: string;
  /** The node-wide cache of downloaded images, shared by all VMs. */
  cacheDir: string;
  /** Where image URLs may lead, and how large and slow a download may be. */
  downloads: DownloadPolicy;
  /** The VM's QEMU identity: its files (and host disks) are given to it, mode 0600 in a 0700 directory. */
  owner: { uid: number; gid: number };
}

/** The file this VM owns for a disk that is not a host path. */
function vmFile(dirs: DiskDirs, disk: DiskSpec): string {
  return join(dirs.vmDir, disk.source.kind === 'cloudInit' ? `${disk.name}.iso` : `${disk.name}.qcow2`);
}

/** Files created by this preparation, removed again if it fails; `staging`: where new files are made first (root's only). */
interface Created {
  files: string[];
  staging: string;
}

async function statOrSpecError(path: string, at: string) {
  const stats = await statIfExists(path);
  if (!stats) throw new SpecError([{ path: at, reason: 'FieldValueNotFound', message: `${path} does not exist on this node` }]);
  return stats;
}

/** What is at `path` in QEMU's directory, not following a link; only a regular file may be there. */
async function existingVmFile(path: string): Promise<boolean> {
  const stats = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
  if (stats && !stats.isFile()) throw new UnsafePathError(`${path} is not a regular file (a symlink or other file put there); refusing it`);
  return stats !== undefined;
}

/**
 * Makes the VM's file `path` with `make(staged)`: the tool writes into root's
 * staging directory, then the file is renamed over whatever is at `path`,
 * so no tool ever opens a name QEMU's uid could have replaced with a link.
 */
async function createInVmDir(path: string, staging: string, make: (staged: string) => Promise<void>): Promise<void> {
  const staged = join(staging, basename(path));
  await make(staged);
  await rename(staged, path);
}

/** Creates the VM's file `path` with `make` unless it already exists; a file made here is recorded for cleanup. */
async function createOnce(path: string, created: Created, make: (staged: string) => Promise<void>): Promise<void> {
  if (await existingVmFile(path)) return;
  created.files.push(path);
  await createInVmDir(path, created.staging, make);
}

/** Creates a host disk file with `make` unless it already exists; a file made here is recorded for cleanup. */
async function createHostOnce(path: string, created: Created, make: () => Promise<void>): Promise<void> {
  if (await statIfExists(path)) return;
  created.files.push(path);
  await make();
}

/** A disk's file before its modes are chosen; `backing`: an overlay's base image. */
type DiskFile = Omit<PreparedDisk, 'modes'> & { backing?: string };

async function prepareDisk(disk: DiskSpec, at: string, dirs: DiskDirs, created: Created, log: Log): Promise<DiskFile> {
  const source = disk.source;
  const path = vmFile(dirs, disk);
  switch (source.kind) {
    case 'host': {
      const { createSizeMiB } = source;
      if (createSizeMiB !== undefined) await createHostOnce(source.path, created, () => createSparseRaw(source.path, createSizeMiB));
      // Never probed: the guest writes to it, and a guest-written qcow2 header must not change how the host opens it.
      const stats = await statOrSpecError(source.path, `${at}.source.path`);
      return { path: source.path, format: 'raw', block: stats.isBlockDevice() };
    }
    case 'image': {
      await statOrSpecError(source.path, `${at}.source.path`);
      const format = await baseFormat(source.path, `${at}.source.path`);
      await createOnce(path, created, (staged) => createOverlay(source.path, format, staged));
      return { path, format: 'qcow2', backing: source.path };
    }
    case 'url': {
      const base = await downloadBase(source.url, `${at}.source.url`, dirs.cacheDir, dirs.downloads, log);
      const format = await baseFormat(base, `${at}.source.url`);
      await createOnce(path, created, (staged) => createOverlay(base, format, staged));
      return { path, format: 'qcow2', backing: base };
    }
    case 'registry':
      // The node agent pulls registry images; one reaching here is a caller's bug, said in the field's terms.
      throw new SpecError([
        { path: `${at}.source`, reason: 'FieldValueInvalid', message: `image ${source.image} was not pulled by the node agent` },
      ]);
    case 'empty':
      await createOnce(path, created, (staged) => createEmptyDisk(staged, source.sizeMiB));
      return { path, format: 'qcow2' };
    case 'cloudInit':
      // Rebuilt every time: it is derived from the spec alone and holds no guest state.
      if (!(await existingVmFile(path))) created.files.push(path);
      await createInVmDir(path, created.staging, (staged) => buildNoCloudIso(source, staged));
      return { path, format: 'raw' };
  }
}

/** All SpecErrors merged into one, so the user sees every cause; otherwise the first failure. */
function combineFailures(failures: unknown[]): unknown {
  const specErrors = failures.filter((f): f is SpecError => f instanceof SpecError);
  if (specErrors.length === 0) return failures[0];
  return new SpecError(
    specErrors.flatMap((e) => e.causes),
    { cause: specErrors[0] },
  );
}

/** Removes `deepest` and its parents up to `topmost` while they are empty; one that someone else filled meanwhile stays. */
async function removeEmptyDirs(deepest: string, topmost: string): Promise<void> {
  for (let dir = deepest; ; dir = dirname(dir)) {
    try {
      await rmdir(dir);
    } catch {
      return;
    }
    if (dir === topmost) return;
  }
}

/**
 * Prepares every disk of a spec that passed validateVmSpec (disk names are
 * safe file names). On failure, everything this call created is removed
 * before the error is thrown; images it downloaded stay in the shared cache.
 */
export async function prepareDisks(spec: VmSpec, dirs: DiskDirs, log: Log): Promise<Record<string, PreparedDisk>> {
  const madeVmDir = await mkdir(dirs.vmDir, { recursive: true });
  // Beside the VM's directory, in the launcher's run directory: root's alone, and on the same filesystem for rename.
  const created: Created = { files: [], staging: await mkdtemp(join(dirname(dirs.vmDir), '.disks-staging-')) };
  const prepareWithModes = async (disk: DiskSpec, at: string): Promise<PreparedDisk> => {
    const { backing, ...file } = await prepareDisk(disk, at, dirs, created, log);
    return { ...file, modes: chooseDriverModes(disk, await probeDiskFacts(file, backing), at) };
  };
  const results = await Promise.allSettled(spec.disks.map((disk, i) => prepareWithModes(disk, `disks[${i}]`))).finally(() =>
    rm(created.staging, { recursive: true, force: true }),
  );
  const failures = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  if (failures.length === 0) {
    const prepared = spec.disks.map((disk, i) => [disk.name, (results[i] as PromiseFulfilledResult<PreparedDisk>).value] as const);
    // A device the view makes a node of QEMU's own for keeps the host node's owner.
    await giveToQemu(
      dirs,
      prepared.filter(([name]) => !ownDeviceNode(spec, name)).map(([, p]) => p),
    );
    log.debug({ disks: spec.disks.map((d) => d.name) }, 'disks prepared');
    return Object.fromEntries(prepared);
  }
  await Promise.all(created.files.map((file) => rm(file, { force: true })));
  if (madeVmDir) await removeEmptyDirs(dirs.vmDir, madeVmDir);
  throw combineFailures(failures);
}

const ownDeviceNode = (spec: VmSpec, name: string): boolean =>
  spec.disks.some((d) => d.name === name && d.source.kind === 'host' && d.source.ownDeviceNode === true);

/**
 * What QEMU opens read-write becomes its own and no one else's: another VM's
 * QEMU (another uid) can neither read nor write it. Base images under the
 * overlays stay root's and read-only. Block devices keep their mode.
 */
async function giveToQemu(dirs: DiskDirs, disks: PreparedDisk[]): Promise<void> {
  const { uid, gid } = dirs.owner;
  await chownNoFollow(dirs.vmDir, dirs.owner, 0o700);
  for (const disk of disks) {
    // A block device is a host path resolved to its real name (no link left); lchown changes no link's target.
    if (disk.block) await lchown(disk.path, uid, gid);
    else await chownNoFollow(disk.path, dirs.owner, 0o600);
  }
}

/** Removes the files prepareDisks made for this VM; host paths and the image cache are left alone. Idempotent. */
export async function removePreparedDisks(spec: VmSpec, dirs: DiskDirs): Promise<void> {
  const owned = spec.disks.filter((disk) => disk.source.kind !== 'host' && disk.source.kind !== 'registry');
  await Promise.all(owned.map((disk) => rm(vmFile(dirs, disk), { force: true })));
}

/** A sparse raw image file; `wx`, so a file that appeared meanwhile is never truncated. */
async function createSparseRaw(path: string, sizeMiB: number): Promise<void> {
  const file = await open(path, 'wx', 0o660);
  try {
    await file.truncate(sizeMiB * 2 ** 20);
  } finally {
    await file.close();
  }
}

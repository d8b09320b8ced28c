// Host files a VM spec names (boot images, kernels, initrds, hostDisks) are
// the node operator's to allow: a pod or VMI may name only regular files
// under the directories the operator listed, never device nodes, never
// vkvm's own state, run or cache directories, and never through a symlink or
// `..` that leads elsewhere. Checked by the launcher before anything reads
// the file (qemu-img runs as root), and the spec that goes on carries the
// resolved path, so QEMU opens exactly the file that was checked.
//
// One exception, which no user input can claim: files the node agent took
// out of registry images (marked `fromImageStore` by its pull step, never by
// a translator) live in the image store, inside vkvm's state directory; they
// pass when they really are regular files inside the store, and nowhere else.
import { constants } from 'node:fs';
import { open, realpath } from 'node:fs/promises';
import path from 'node:path';
import { SpecError, type SpecCause } from './errors.js';
import type { VmSpec } from './spec.js';

export interface HostFilePolicy {
  /** Directories whose regular files may be boot images, kernels and initrds; empty: none. */
  imageDirs: readonly string[];
  /** Directories where KubeVirt hostDisks may live (created there when missing); empty: hostDisk is off. */
  hostDiskDirs: readonly string[];
  /** Never nameable, whatever the lists say: vkvm's state, run and image cache directories. */
  deniedDirs: readonly string[];
  /** The node agent's image store (provider/images/store.ts): where `fromImageStore` files must be; absent: none pass. */
  imageStoreDir?: string;
}

export const NO_HOST_FILES: HostFilePolicy = { imageDirs: [], hostDiskDirs: [], deniedDirs: [] };

const within = (file: string, dir: string): boolean => file === dir || file.startsWith(dir.endsWith('/') ? dir : `${dir}/`);

/** Resolves what the policy's directories really are; a listed directory that does not exist allows nothing yet. */
async function realDirs(dirs: readonly string[]): Promise<string[]> {
  return Promise.all(dirs.map((d) => realpath(d).catch(() => path.resolve(d))));
}

interface Check {
  path: string;
  at: string;
  /** Which list allows it, for the message; imageStore: the agent's pulled files. */
  list: 'image' | 'hostDisk' | 'imageStore';
  /** A missing file is fine: the launcher creates it (DiskOrCreate). */
  mayCreate?: boolean;
}

function forbidden(at: string, message: string): SpecCause {
  return { path: at, reason: 'FieldValueForbidden', message };
}

/**
 * The path the VM may use for `c.path`, or the cause that refuses it. The
 * lexical check comes first, so nothing outside the lists is even stat'ed.
 */
async function resolveOne(c: Check, policy: HostFilePolicy): Promise<string | SpecCause> {
  if (c.list === 'imageStore') return resolveStored(c, policy);
  const dirs = c.list === 'image' ? policy.imageDirs : policy.hostDiskDirs;
  const flag = c.list === 'image' ? '--host-image-dir' : '--host-disk-dir';
  if (!path.isAbsolute(c.path) || c.path.split('/').includes('..')) {
    return { path: c.at, reason: 'FieldValueInvalid', message: `${c.path} must be an absolute path without ".." components` };
  }
  if (dirs.length === 0) {
    return forbidden(
      c.at,
      `${c.path}: this node allows no host ${c.list === 'image' ? 'image files' : 'disks'} (the node operator lists directories with ${flag})`,
    );
  }
  const allowed = dirs.map((d) => path.resolve(d));
  const outside = forbidden(c.at, `${c.path} is outside the directories this node allows (${allowed.join(', ')})`);
  if (!allowed.some((d) => within(c.path, d))) return outside;
  let real: string;
  try {
    real = await realpath(c.mayCreate ? path.dirname(c.path) : c.path);
    if (c.mayCreate) real = path.join(real, path.basename(c.path));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    return { path: c.at, reason: 'FieldValueNotFound', message: `${c.path} does not exist on this node` };
  }
  // Where it really is decides, not how it was named: a symlink inside an allowed directory may point anywhere.
  if (!(await realDirs(allowed)).some((d) => within(real, d))) return outside;
  if ((await realDirs(policy.deniedDirs)).some((d) => within(real, d))) {
    return forbidden(c.at, `${c.path} is inside a directory vkvm keeps for itself`);
  }
  return regularFile(real, c);
}

/** A file of the agent's image store: its real path inside the store, a regular file. */
async function resolveStored(c: Check, policy: HostFilePolicy): Promise<string | SpecCause> {
  const outside = forbidden(c.at, `${c.path} is not in this node's image store`);
  if (!policy.imageStoreDir || !path.isAbsolute(c.path) || c.path.split('/').includes('..')) return outside;
  if (!within(c.path, path.resolve(policy.imageStoreDir))) return outside;
  let real: string;
  try {
    real = await realpath(c.path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    return { path: c.at, reason: 'FieldValueNotFound', message: `${c.path} is no longer in this node's image store` };
  }
  const [store] = await realDirs([policy.imageStoreDir]);
  if (!within(real, store!)) return outside;
  return regularFile(real, c);
}

/** Opened without following a symlink and without blocking on a FIFO; only a regular file passes. */
async function regularFile(real: string, c: Check): Promise<string | SpecCause> {
  let file;
  try {
    file = await open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' && c.mayCreate) return real;
    if (code === 'ENOENT') return { path: c.at, reason: 'FieldValueNotFound', message: `${c.path} does not exist on this node` };
    if (code === 'ELOOP') return forbidden(c.at, `${c.path} is a symlink`);
    throw err;
  }
  try {
    if (!(await file.stat()).isFile()) return forbidden(c.at, `${c.path} is not a regular file (device nodes and directories are refused)`);
    return real;
  } finally {
    await file.close();
  }
}

/**
 * Checks every host file the spec names against the policy and returns the
 * spec with each replaced by its resolved path; a SpecError lists every
 * refusal. Disks from PersistentVolumes are the administrator's and pass as
 * they are.
 */
export async function resolveHostFiles(spec: VmSpec, policy: HostFilePolicy): Promise<VmSpec> {
  const causes: SpecCause[] = [];
  const resolve = async (c: Check): Promise<string> => {
    const r = await resolveOne(c, policy);
    if (typeof r === 'string') return r;
    causes.push(r);
    return c.path;
  };
  const disks = await Promise.all(
    spec.disks.map(async (disk, i) => {
      const s = disk.source;
      const at = `disks[${i}].source.path`;
      if (s.kind === 'image')
        return { ...disk, source: { ...s, path: await resolve({ path: s.path, at, list: s.fromImageStore ? 'imageStore' : 'image' }) } };
      if (s.kind === 'registry') causes.push(forbidden(`disks[${i}].source`, `image ${s.image} was not pulled by the node agent`));
      if (s.kind === 'host' && !s.fromPersistentVolume) {
        return {
          ...disk,
          source: { ...s, path: await resolve({ path: s.path, at, list: 'hostDisk', mayCreate: s.createSizeMiB !== undefined }) },
        };
      }
      return disk;
    }),
  );
  let kernelBoot = spec.kernelBoot;
  if (kernelBoot?.container)
    causes.push(forbidden('kernelBoot.container', `image ${kernelBoot.container.image} was not pulled by the node agent`));
  else if (kernelBoot) {
    const list = kernelBoot.fromImageStore ? 'imageStore' : 'image';
    const kernelPath = await resolve({ path: kernelBoot.kernelPath, at: 'kernelBoot.kernelPath', list });
    const initrd = kernelBoot.initrdPath;
    kernelBoot = {
      ...kernelBoot,
      kernelPath,
      ...(initrd !== undefined ? { initrdPath: await resolve({ path: initrd, at: 'kernelBoot.initrdPath', list }) } : {}),
    };
  }
  if (causes.length) throw new SpecError(causes);
  return { ...spec, disks, ...(kernelBoot ? { kernelBoot } : {}) };
}

/** A PersistentVolume's place in the VM's filesystem view: a directory bound, or a device node of QEMU's own. */
export interface VolumeViewEntry {
  path: string;
  readOnly: boolean;
  /** `path` is a published block device: the view makes a node of its own there (ownDeviceNode), nothing else of its directory. */
  device?: boolean;
}

/**
 * What of the spec's PersistentVolume disks the VM's filesystem view must
 * hold: the PV's own directory for a file on a Filesystem volume (where the
 * launcher may create it), the device's for a local Block one (nothing beyond
 * the host's /dev, which the view has), and a published CSI device itself.
 */
export function persistentVolumeDirs(spec: VmSpec): VolumeViewEntry[] {
  return spec.disks.flatMap((d): VolumeViewEntry[] => {
    const s = d.source;
    if (s.kind !== 'host' || !s.fromPersistentVolume) return [];
    const readOnly = !!d.readOnly;
    return [s.ownDeviceNode ? { path: s.path, readOnly, device: true } : { path: path.dirname(s.path), readOnly }];
  });
}

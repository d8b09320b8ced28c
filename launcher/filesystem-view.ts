// What a VM's libvirtd and QEMU see of the host: an allow-list. Their mount
// namespace (libvirtd.ts) gets a new root, an empty read-only tmpfs, holding
// only what they need: the system software (/usr and the merged-usr links),
// /dev, /sys, a /proc of their own, an empty /tmp, the few /etc files
// libvirtd and QEMU open (found with strace: the loader's cache, the account
// and NSS files for uid lookups, the time zone), libvirt's private
// directories and the node's libvirt cache (bound by libvirtd.ts),
// and bound back at their host paths: the VM's own directory read-write, the
// image store, the image cache and the operator's image directories
// read-only, the operator's hostDisk directories and the VM's
// PersistentVolume directories as asked; a published CSI block device
// becomes a device node of the VM's own at its host path (made by the init
// script, owned by QEMU's uid: the host's /dev node keeps its owner, and
// nothing else of the directory it was published in is there). Everything else (/etc's other
// files, /var, /run, /home, /root, /srv, /opt, /mnt, other VMs' files, the
// node's keys) is simply not there. Where the node keeps secrets inside a
// directory the view does bind (vkvm's state inside /usr/local, say), those
// are covered with empty read-only tmpfs.

import { lstat, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { HostFilePolicy, VolumeViewEntry } from '../vmm/host-files.js';

/** Where the node and its users keep secrets, hidden besides vkvm's own directories wherever a bound directory holds them. */
export const HIDDEN_HOST_DIRS = ['/root', '/home', '/etc/kubernetes'] as const;

/**
 * What QEMU and libvirtd need of the system, all public: software read-only
 * (a path that is a symlink on the host, as /bin is with merged /usr, is
 * recreated as that symlink), devices, sysfs, and the /etc files they open.
 */
const SYSTEM_VIEW: readonly ViewEntry[] = [
  ...['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'].map((p): ViewEntry => ({ op: 'keep-ro', path: p })),
  // The host's devices: libvirt builds QEMU's own /dev from them (qemu.conf namespaces, on by default).
  { op: 'rbind', path: '/dev' },
  { op: 'rbind', path: '/sys' },
  { op: 'proc', path: '/proc' },
  { op: 'tmpfs', path: '/tmp' },
  ...['/etc/ld.so.cache', '/etc/nsswitch.conf', '/etc/passwd', '/etc/group', '/etc/localtime'].map((p): ViewEntry => ({
    op: 'keep-ro',
    path: p,
  })),
];

/**
 * keep-ro/keep-rw: the host path bound at the same path (a symlink copied);
 * rbind: bound with everything mounted below it; proc: a new procfs; tmpfs:
 * an empty writable one; hide: an empty read-only tmpfs over a directory a
 * bound one holds; device-rw/device-ro: a new node of the host path's block
 * device, QEMU's alone (0600, or 0400).
 */
export type ViewEntry = { op: 'keep-ro' | 'keep-rw' | 'rbind' | 'proc' | 'tmpfs' | 'hide' | 'device-rw' | 'device-ro'; path: string };

export interface ViewInputs {
  /** The VM's directory (disks, sockets, libvirt's private state): kept read-write. */
  vmDir: string;
  imageCacheDir: string;
  hostFiles: HostFilePolicy;
  /** Directories of the VM's PersistentVolume disks (each the PV's own), and its published devices, outside every list. */
  volumeDirs?: readonly VolumeViewEntry[];
  /** Programs the namespace runs (libvirtd, the emulator) where no kept directory holds them. */
  programs?: readonly string[];
}

const within = (p: string, dir: string): boolean => p === dir || p.startsWith(dir === '/' ? '/' : `${dir}/`);
const binds = (e: ViewEntry): boolean => e.op === 'keep-ro' || e.op === 'keep-rw' || e.op === 'rbind';

/**
 * The mounts that make the view, in the order to apply them (parents first):
 * the system part, then the VM's directories. One a bound entry already
 * gives the same way (or /dev's devices) needs nothing; where a directory is
 * both kept and hidden, kept wins; a hidden directory matters only inside a
 * bound one, and only when no hidden one between covers it already.
 */
export function planFilesystemView(o: ViewInputs): ViewEntry[] {
  const wanted = new Map<string, ViewEntry['op']>(SYSTEM_VIEW.map((e) => [e.path, e.op]));
  const keep = (p: string, op: 'keep-ro' | 'keep-rw'): void => {
    const at = path.resolve(p);
    const was = wanted.get(at);
    // Read-write wins where both are asked (a host disk directory the image list also names); an operator's
    // directory wins over the empty /tmp; /dev, /sys and /proc stay as they are.
    if (was === undefined || was === 'keep-ro' || was === 'tmpfs') wanted.set(at, op);
  };
  for (const d of [o.imageCacheDir, ...(o.hostFiles.imageStoreDir ? [o.hostFiles.imageStoreDir] : []), ...o.hostFiles.imageDirs])
    keep(d, 'keep-ro');
  for (const p of o.programs ?? []) keep(p, 'keep-ro');
  for (const d of [o.vmDir, ...o.hostFiles.hostDiskDirs]) keep(d, 'keep-rw');
  for (const v of o.volumeDirs ?? []) if (!v.device) keep(v.path, v.readOnly ? 'keep-ro' : 'keep-rw');
  for (const v of o.volumeDirs ?? []) if (v.device) wanted.set(path.resolve(v.path), v.readOnly ? 'device-ro' : 'device-rw');
  const entries = [...wanted].map(([p, op]): ViewEntry => ({ op, path: p }));
  const hidden = [...new Set([...o.hostFiles.deniedDirs, ...HIDDEN_HOST_DIRS].map((d) => path.resolve(d)))].filter((h) => !wanted.has(h));
  /** The innermost bound entry holding `p` (itself excluded). */
  const holder = (p: string): ViewEntry | undefined =>
    entries.filter((e) => e.path !== p && binds(e) && within(p, e.path)).sort((a, b) => b.path.length - a.path.length)[0];
  const hides = hidden.filter((h) => {
    const k = holder(h);
    return k !== undefined && !hidden.some((outer) => outer !== h && within(h, outer) && within(outer, k.path));
  });
  // A node made inside a bound directory would be made in the host's, unless a hiding tmpfs between takes it.
  const hiddenIn = (p: string, k: ViewEntry): boolean => hides.some((h) => within(p, h) && within(h, k.path));
  const boundOver = entries.find((e) => {
    const k = e.op.startsWith('device-') ? holder(e.path) : undefined;
    return k !== undefined && !hiddenIn(e.path, k);
  });
  if (boundOver)
    throw new Error(`the published device ${boundOver.path} is inside ${holder(boundOver.path)!.path}, which the view binds from the host`);
  const needed = entries.filter((e) => {
    if (!binds(e)) return true;
    const k = holder(e.path);
    const covered = k !== undefined && hiddenIn(e.path, k);
    return k === undefined || covered || (k.op !== e.op && k.op !== 'rbind');
  });
  return [...needed, ...hides.map((p): ViewEntry => ({ op: 'hide', path: p }))].sort(
    (a, b) => a.path.length - b.path.length || a.path.localeCompare(b.path),
  );
}

/**
 * The directories of the view as they really are on the host (a symlinked
 * one resolved: the launcher's checked paths are real paths, and QEMU opens
 * those); one that does not exist is left as given and dropped later.
 */
export async function realViewInputs(o: ViewInputs): Promise<ViewInputs> {
  const real = (p: string): Promise<string> => realpath(p).catch(() => path.resolve(p));
  const all = (ps: readonly string[]): Promise<string[]> => Promise.all(ps.map(real));
  return {
    vmDir: await real(o.vmDir),
    imageCacheDir: await real(o.imageCacheDir),
    hostFiles: {
      ...o.hostFiles,
      imageDirs: await all(o.hostFiles.imageDirs),
      hostDiskDirs: await all(o.hostFiles.hostDiskDirs),
      deniedDirs: await all(o.hostFiles.deniedDirs),
      ...(o.hostFiles.imageStoreDir ? { imageStoreDir: await real(o.hostFiles.imageStoreDir) } : {}),
    },
    volumeDirs: await Promise.all((o.volumeDirs ?? []).map(async (v) => ({ ...v, path: await real(v.path) }))),
    programs: await all(o.programs ?? []),
  };
}

/**
 * The plan's entries that can be made: a path to bind must exist (a symlink
 * counts, as itself), a directory to hide must be one; a new procfs or tmpfs
 * needs nothing of the host.
 */
export async function existingEntries(plan: ViewEntry[]): Promise<ViewEntry[]> {
  const exists = await Promise.all(
    plan.map(async (e) => {
      if (e.op === 'proc' || e.op === 'tmpfs') return true;
      if (e.op === 'device-rw' || e.op === 'device-ro')
        return stat(e.path).then(
          (s) => s.isBlockDevice(),
          () => false,
        );
      if (e.op === 'hide')
        return stat(e.path).then(
          (s) => s.isDirectory(),
          () => false,
        );
      return lstat(e.path).then(
        () => true,
        () => false,
      );
    }),
  );
  return plan.filter((_, i) => exists[i]);
}

/** The entries as arguments of libvirtd.ts's init script: `op:path`. */
export const viewArgs = (plan: ViewEntry[]): string[] => plan.map((e) => `${e.op}:${e.path}`);

// What a VM's libvirtd and QEMU see of the host: their mount namespace
// (libvirtd.ts) covers the directories where the node and its users keep
// secrets (vkvm's state and run directories, which hold every VM's files, the
// node's keys and, under `vkvm up`, the cluster's; /root, /home,
// /etc/kubernetes) with empty read-only tmpfs, then binds back what this VM
// needs under them: its own directory, and read-only the image store, the
// image cache and the operator's image directories. A QEMU that escapes its
// guest sees no other VM's files and no node secret, whatever their modes.

import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { HostFilePolicy } from '../vmm/host-files.js';

/** Where the node and its users keep secrets, hidden from every VM besides vkvm's own directories. */
export const HIDDEN_HOST_DIRS = ['/root', '/home', '/etc/kubernetes'] as const;

export type ViewEntry = { op: 'hide' | 'keep-ro' | 'keep-rw'; path: string };

export interface ViewInputs {
  /** The VM's directory (disks, sockets, libvirt's private state): kept read-write. */
  vmDir: string;
  imageCacheDir: string;
  hostFiles: HostFilePolicy;
}

const within = (p: string, dir: string): boolean => p === dir || p.startsWith(dir === '/' ? '/' : `${dir}/`);

/**
 * The mounts that make the view, in the order to apply them (parents
 * first): a directory both hidden and kept is kept; a hidden directory
 * inside another is covered already, unless a kept one between them brings
 * it back; a read-write directory no hidden one covers needs nothing.
 */
export function planFilesystemView(o: ViewInputs): ViewEntry[] {
  const keepRo = [o.imageCacheDir, ...(o.hostFiles.imageStoreDir ? [o.hostFiles.imageStoreDir] : []), ...o.hostFiles.imageDirs];
  const keepRw = [o.vmDir, ...o.hostFiles.hostDiskDirs];
  const hidden = [...new Set([...o.hostFiles.deniedDirs, ...HIDDEN_HOST_DIRS].map((d) => path.resolve(d)))];
  const kept = new Map<string, ViewEntry['op']>();
  for (const d of keepRo) kept.set(path.resolve(d), 'keep-ro');
  // Read-write wins where both are asked (a host disk directory the image list also names).
  for (const d of keepRw) kept.set(path.resolve(d), 'keep-rw');
  const hides = hidden.filter(
    (h) =>
      !kept.has(h) &&
      !hidden.some((outer) => outer !== h && within(h, outer) && ![...kept.keys()].some((k) => within(k, outer) && within(h, k))),
  );
  const keeps = [...kept].filter(([k, op]) => op === 'keep-ro' || hides.some((h) => within(k, h)));
  return [...hides.map((p): ViewEntry => ({ op: 'hide', path: p })), ...keeps.map(([p, op]): ViewEntry => ({ op, path: p }))].sort(
    (a, b) => a.path.length - b.path.length || a.path.localeCompare(b.path),
  );
}

/** The plan's entries whose directories exist (one that does not has nothing to hide, and cannot be bound). */
export async function existingEntries(plan: ViewEntry[]): Promise<ViewEntry[]> {
  const exists = await Promise.all(
    plan.map((e) =>
      stat(e.path).then(
        (s) => s.isDirectory(),
        () => false,
      ),
    ),
  );
  return plan.filter((_, i) => exists[i]);
}

/** The entries as arguments of libvirtd.ts's init script: `op:path`. */
export const viewArgs = (plan: ViewEntry[]): string[] => plan.map((e) => `${e.op}:${e.path}`);

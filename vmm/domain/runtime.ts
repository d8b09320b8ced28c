// What the launcher knows only at run time and hands to the domain builders:
// host paths of prepared disks and of the sockets it owns. Builders do no I/O;
// everything they need from the host arrives here or in HostCaps.

import type { DiskCache, DiskIo } from '../spec.js';

export type DiskFormat = 'qcow2' | 'raw';

export interface PreparedDisk {
  /** Host path QEMU opens (an overlay, an emptyDisk file, an ISO, or a host path used in place). */
  path: string;
  format: DiskFormat;
  /** The path is a block device (libvirt disk type='block'); QEMU's file driver refuses those. */
  block?: boolean;
  /** Host cache and AIO modes, chosen for the path's file system (vmm/disks/driver-modes.ts); no io: QEMU's default. */
  modes: { cache: DiskCache; io?: DiskIo };
}

export interface DomainRuntime {
  /** QEMU binary, e.g. /usr/bin/qemu-system-x86_64. */
  emulatorPath: string;
  /** Unix socket QEMU binds for the serial console; the launcher connects and holds it. */
  consoleSocketPath: string;
  /** Unix socket QEMU binds for the guest-agent channel, when the spec asks for one. */
  guestAgentSocketPath?: string;
  /** Unix socket QEMU listens on for VNC clients, when the spec asks for a display. */
  vncSocketPath?: string;
  /** Prepared disks keyed by DiskSpec.name; every disk in the spec must be present. */
  disks: Record<string, PreparedDisk>;
}

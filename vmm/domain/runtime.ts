// What the launcher knows only at run time and hands to the domain builders:
// host paths of prepared disks and of the sockets it owns. Builders do no I/O;
// everything they need from the host arrives here or in HostCaps.

export type DiskFormat = 'qcow2' | 'raw';

export interface PreparedDisk {
  /** Host path QEMU opens (an overlay, an emptyDisk file, an ISO, or a host path used in place). */
  path: string;
  format: DiskFormat;
  /** The path is a block device (libvirt disk type='block'); QEMU's file driver refuses those. */
  block?: boolean;
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

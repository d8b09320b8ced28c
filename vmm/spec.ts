// The one internal description of a virtual machine: the seam between
// Kubernetes (provider/) and the hypervisor (vmm/, launcher/). Plain,
// versioned, JSON-serialisable data; no Kubernetes types may appear here.

export const VM_SPEC_VERSION = 1 as const;

/** Kubernetes' image pull policies, which the node agent applies to registry images. */
export type ImagePullPolicy = 'Always' | 'IfNotPresent' | 'Never';

/** Where a disk's bytes come from. */
export type DiskSource =
  /**
   * A raw or qcow2 image on the host; the VM writes to a qcow2 overlay on top of it.
   * `fromImageStore`: a disk the node agent took out of a registry image into its
   * image store, set only by its pull step (provider/images/), never by a
   * translator; vmm/host-files.ts accepts such a path inside the store only.
   */
  | { kind: 'image'; path: string; fromImageStore?: boolean }
  /**
   * A disk in an OCI image (a KubeVirt containerDisk): `path` in it, else the
   * one file under /disk. The node agent pulls it and hands the launcher an
   * `image` disk in its store instead; a launcher refuses this kind.
   */
  | { kind: 'registry'; image: string; path?: string; pullPolicy: ImagePullPolicy }
  /** An http(s) image downloaded once into the content-addressed cache, then overlaid. */
  | { kind: 'url'; url: string }
  /** A new sparse qcow2 disk of the given size, removed with the VM. */
  | { kind: 'empty'; sizeMiB: number }
  /**
   * A host block device or file used in place (no overlay; survives the VM);
   * with `createSizeMiB`, a missing file is first created sparse at that size
   * (KubeVirt's DiskOrCreate hostDisk, a filesystem PVC's disk.img).
   * `fromPersistentVolume`: an administrator's PersistentVolume, outside the
   * node's host-file policy (vmm/host-files.ts), which every other path obeys.
   * `ownDeviceNode`: a block device published at `path` (a CSI volume in Block
   * mode) that QEMU gets as a device node of its own, made at that path in its
   * filesystem view and owned by its uid; the host's node keeps its owner.
   */
  | { kind: 'host'; path: string; createSizeMiB?: number; fromPersistentVolume?: boolean; ownDeviceNode?: boolean }
  /** A cloud-init NoCloud seed ISO built from the given documents. */
  | { kind: 'cloudInit'; userData: string; metaData: string; networkConfig?: string };

export type DiskBus = 'virtio' | 'sata' | 'scsi';
export const DISK_BUSES: readonly DiskBus[] = ['virtio', 'sata', 'scsi'];
/** QEMU's host cache mode for a disk (KubeVirt's disks[].cache): none opens the file with O_DIRECT. */
export type DiskCache = 'none' | 'writethrough' | 'writeback';
export const DISK_CACHES: readonly DiskCache[] = ['none', 'writethrough', 'writeback'];
/** QEMU's asynchronous I/O for a disk (KubeVirt's disks[].io): native (Linux AIO) needs cache none. */
export type DiskIo = 'native' | 'threads';
export const DISK_IOS: readonly DiskIo[] = ['native', 'threads'];

export interface DiskSpec {
  /** Stable name, unique in the VM; also the libvirt alias suffix. */
  name: string;
  device: 'disk' | 'cdrom';
  bus: DiskBus;
  source: DiskSource;
  readOnly?: boolean;
  /** 1-based; lower boots first. Unique within the VM when set. */
  bootOrder?: number;
  /** Absent: chosen on the node from the disk's file system, as KubeVirt does (vmm/disks/driver-modes.ts). */
  cache?: DiskCache;
  /** Absent: native where cache is none on a block device or a fully allocated file, else QEMU's default. */
  io?: DiskIo;
  /**
   * The iothread (1..VmSpec.ioThreads) that runs this virtio disk's requests
   * outside QEMU's main loop (libvirt's `<driver iothread>`); absent: the main loop.
   */
  ioThread?: number;
  /** virtio-blk request queues (KubeVirt's blockMultiQueue: one per vCPU); absent: QEMU's default. */
  queues?: number;
}

/** Boot straight into a kernel (no firmware boot loader). */
export interface KernelBoot {
  /** A host path; with `container`, a path inside that image. */
  kernelPath: string;
  initrdPath?: string;
  cmdline?: string;
  /**
   * The kernel and initrd are in this OCI image (KubeVirt's
   * kernelBoot.container); the node agent pulls it and replaces both paths
   * with files in its image store. A launcher refuses a spec that still has it.
   */
  container?: { image: string; pullPolicy: ImagePullPolicy };
  /** Both paths are in the node's image store: set only by the agent's pull step, as on `image` disks. */
  fromImageStore?: boolean;
}

/** BIOS (SeaBIOS; `useSerial` prints its output on the serial console, which has no screen) or UEFI (OVMF). */
export type Firmware = { kind: 'bios'; useSerial?: boolean } | { kind: 'efi'; secureBoot?: boolean };

/** Whether the firmware itself writes to the serial console: OVMF always does, SeaBIOS only with useSerial. */
export const firmwareOnConsole = (f: Firmware): boolean => f.kind === 'efi' || f.useSerial === true;

export type CpuModel = 'host-model' | 'host-passthrough' | { named: string };

export interface CpuSpec {
  sockets: number;
  cores: number;
  threads: number;
  model?: CpuModel;
  /** CPU limit in millicores, enforced by the launcher's cgroup quota; absent = unlimited. */
  limitMillicores?: number;
  /**
   * CPU request in millicores (the pod's, as the scheduler accounted it): the launcher cgroup's CPU
   * weight under contention, as the kubelet sets a pod's; absent = none, the least weight.
   */
  requestMillicores?: number;
}

export type InterfaceBinding = 'masquerade' | 'bridge';

/** A port of the pod address forwarded to a masquerade guest. */
export interface ForwardPort {
  name?: string;
  protocol: 'TCP' | 'UDP';
  port: number;
}

export interface InterfaceSpec {
  name: string;
  /** bridge: the guest holds the pod address; masquerade: the guest has a private address behind NAT. */
  binding: InterfaceBinding;
  /** Stable MAC address, lower-case, colon-separated. */
  mac: string;
  /**
   * Tap device the VM attaches to, in the VM's network namespace; created by
   * the provider's network plumbing, which owns its wiring.
   */
  tapDevice?: string;
  /** masquerade only: ports forwarded to the guest; absent = all (KubeVirt's rule). */
  forwardPorts?: ForwardPort[];
  model?: 'virtio' | 'e1000';
  /** PXE boot priority, 1 first; unique across disks and interfaces. */
  bootOrder?: number;
}

export interface VmSpec {
  version: typeof VM_SPEC_VERSION;
  /** Stable identifier of the VM on its node (launcher, directories). For pods, the pod UID. */
  uid: string;
  /**
   * The SMBIOS system UUID the guest sees (KubeVirt's firmware.uuid); `uid`
   * when absent. It is also the libvirt domain uuid, because libvirt refuses a
   * <sysinfo> system uuid that differs from the domain's.
   */
  systemUuid?: string;
  /** libvirt domain name (unique per node). */
  name: string;
  machineType?: string;
  cpu: CpuSpec;
  memoryMiB: number;
  firmware: Firmware;
  kernelBoot?: KernelBoot;
  disks: DiskSpec[];
  /** QEMU iothreads (libvirt's `<iothreads>`), ids 1..ioThreads, which disks name by `ioThread`; absent: none. */
  ioThreads?: number;
  interfaces: InterfaceSpec[];
  /** Expose a QEMU guest agent channel. */
  guestAgent: boolean;
  /** A VNC display: a VGA card whose screen is served on the launcher's VNC socket. Absent: none. */
  vnc?: boolean;
  /** ACPI on; required for graceful shutdown. */
  acpi: boolean;
  /** The guest's real-time clock at boot; UTC when absent. */
  clock?: GuestClock;
  /** Free-form labels carried for logs and metrics (e.g. pod namespace/name). */
  labels: Record<string, string>;
}

/**
 * Where the guest's RTC starts: UTC shifted by offsetSeconds (KubeVirt's
 * clock.utc.offsetSeconds), the host's local time, or a named IANA time zone
 * (clock.timezone). The guest may set it later; a reboot starts it anew.
 */
export type GuestClock = { kind: 'utc'; offsetSeconds?: number } | { kind: 'localtime' } | { kind: 'timezone'; timezone: string };

/** The libvirt domain uuid, which QEMU hands the guest as its SMBIOS system UUID. */
export function domainUuidOf(spec: VmSpec): string {
  return spec.systemUuid ?? spec.uid;
}

/** Total vCPUs a spec asks for. */
export function vcpuCount(cpu: CpuSpec): number {
  return cpu.sockets * cpu.cores * cpu.threads;
}

// The kubevirt.io/v1 names and the value lists of the subset vkvm runs: the
// CRDs, the API client and the controllers all take them from here.
import type { DiskBus as VmDiskBus, DiskCache as VmDiskCache, DiskIo as VmDiskIo } from '../../vmm/spec.js';

export const GROUP = 'kubevirt.io';
export const VERSION = 'v1';
export const KUBEVIRT_API_VERSION = `${GROUP}/${VERSION}` as const;
export const VM_PLURAL = 'virtualmachines';
export const VMI_PLURAL = 'virtualmachineinstances';

export const RUN_STRATEGIES = ['Always', 'Halted', 'Manual', 'RerunOnFailure', 'Once'] as const;
export type RunStrategy = (typeof RUN_STRATEGIES)[number];
/** What a drain does to a VMI (KubeVirt's evictionStrategy); the default is the controllers' --eviction-strategy. */
export const EVICTION_STRATEGIES = ['None', 'LiveMigrate', 'LiveMigrateIfPossible', 'External'] as const;
export type EvictionStrategy = (typeof EVICTION_STRATEGIES)[number];

/**
 * The disk buses the CRD admits, by KubeVirt's names: the ones vkvm runs.
 * KubeVirt also has usb (and refuses ide), which vkvm refuses. Each is passed
 * on as the VmSpec bus of the same name (vmm/spec.ts DISK_BUSES, the
 * hypervisor side), which `satisfies` keeps true.
 */
export const DISK_BUSES = ['virtio', 'sata', 'scsi'] as const satisfies readonly VmDiskBus[];
export type DiskBus = (typeof DISK_BUSES)[number];
/** A CD-ROM needs a bus that carries removable media: KubeVirt refuses virtio too. */
export const CDROM_BUSES = DISK_BUSES.filter((b) => b !== 'virtio');
/** KubeVirt's disk cache modes (v1.DriverCache), each the VmSpec mode of the same name. */
export const DISK_CACHES = ['none', 'writethrough', 'writeback'] as const satisfies readonly VmDiskCache[];
export type DiskCache = (typeof DISK_CACHES)[number];
/** KubeVirt's disk AIO modes (v1.DriverIO), each the VmSpec mode of the same name. */
export const DISK_IOS = ['native', 'threads'] as const satisfies readonly VmDiskIo[];
export type DiskIo = (typeof DISK_IOS)[number];
/**
 * KubeVirt's ioThreadsPolicy values: shared (one iothread for the disks),
 * auto (a pool of two per requested CPU) and supplementalPool (every disk's
 * queues spread over ioThreads.supplementalPoolThreadCount threads, which
 * needs libvirt 10 and QEMU 9; vkvm refuses it).
 */
export const IO_THREADS_POLICIES = ['shared', 'auto', 'supplementalPool'] as const;
export type IoThreadsPolicy = (typeof IO_THREADS_POLICIES)[number];

/**
 * KubeVirt's own limit on disks and volumes (arrayLenMax). It also bounds the
 * estimated cost of the CEL rules that compare every item with every other:
 * measured on Kubernetes 1.33, the unique-name rule on 256 volumes of 256-char
 * names takes about 70% of the apiserver's per-rule budget; 512 is 2.9x over.
 */
export const MAX_DEVICES = 256;
/** Bounds the cost of name comparisons in CEL; KubeVirt's maxStrLen. */
export const MAX_NAME_LENGTH = 256;
export const VMIM_PLURAL = 'virtualmachineinstancemigrations';

/** migrations.kubevirt.io/v1alpha1: the MigrationPolicy API (cluster-scoped, as in KubeVirt). */
export const MIGRATIONS_GROUP = 'migrations.kubevirt.io';
export const MIGRATIONS_VERSION = 'v1alpha1';
export const MIGRATION_POLICY_PLURAL = 'migrationpolicies';

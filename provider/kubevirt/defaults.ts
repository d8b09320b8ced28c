// KubeVirt's defaulting of a new VMI's disks, as virt-api's VMI mutating
// webhook does it at admission (SetDefaultVolumeDisk, then the DiskDevice
// default and the amd64 bus default): every volume that no disk and no
// filesystem names gets a disk of its name, a `disk` target on the SATA bus.
// vkvm has no mutating webhook; the VMI controller writes these disks into
// the VMI before it creates the launcher pod (controllers/vmi-controller.ts),
// so the VMI shows them as KubeVirt's does, and the pod is sized and the node
// translates from the defaulted spec. Pure.
import type { Disk, VirtualMachineInstanceSpec } from './types.js';

/** The bus KubeVirt's amd64 defaulting gives a disk that names none (vkvm runs amd64 only). */
export const DEFAULT_DISK_BUS = 'sata';

/**
 * The VMI's disks with one added per volume that has none, or undefined when no volume lacks one.
 * `bus` is a preference's preferredDiskBus, which KubeVirt applies before its bus default.
 */
export function disksWithDefaults(spec: VirtualMachineInstanceSpec, bus: string = DEFAULT_DISK_BUS): Disk[] | undefined {
  const devices = spec.domain?.devices ?? {};
  const disks = Array.isArray(devices.disks) ? devices.disks : [];
  const filesystems = Array.isArray(devices.filesystems) ? devices.filesystems : [];
  const named = new Set([...disks, ...filesystems].map((d) => d?.name));
  const missing = (Array.isArray(spec.volumes) ? spec.volumes : [])
    .map((v) => v?.name)
    .filter((name): name is string => typeof name === 'string' && name !== '' && !named.has(name));
  if (missing.length === 0) return undefined;
  return [...disks, ...[...new Set(missing)].map((name): Disk => ({ name, disk: { bus } }))];
}

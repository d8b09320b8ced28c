// A preference applied to a VMI spec, as KubeVirt's preference applier does
// it (pkg/instancetype/preference/apply): each preferred value fills a field
// the VMI leaves unset, never overriding what the VM states. Preferences are
// hints: vkvm applies those below and ignores the rest (preferredRng,
// preferredTPM, preferredTimer, Hyper-V, input devices, disk cache and I/O,
// network multi-queue, …), as a VMI of the same fields would run without them.
// Also the preference's requirements on the instancetype (KubeVirt's
// requirements checker). Pure; works on a copy.
import { parseQuantity } from '../../kube/quantity.js';
import type { Disk, InstancetypeSpec, PreferenceSpec, VirtualMachineInstanceSpec } from '../types.js';

function applyDisks(pref: PreferenceSpec, disks: Disk[]): Disk[] {
  const devices = pref.devices ?? {};
  return disks.map((disk) => {
    // A disk with no target is a disk (KubeVirt's applyDiskPreferences).
    const d: Disk = disk.disk || disk.cdrom || (disk as { lun?: unknown }).lun ? { ...disk } : { ...disk, disk: {} };
    if (d.disk) {
      if (!d.disk.bus && devices.preferredDiskBus) d.disk = { ...d.disk, bus: devices.preferredDiskBus };
      // KubeVirt gives it to virtio disks only, once the bus is known.
      const dedicated = devices.preferredDiskDedicatedIoThread;
      if (d.disk.bus === 'virtio' && d.dedicatedIOThread === undefined && dedicated !== undefined) d.dedicatedIOThread = dedicated;
    } else if (d.cdrom && !d.cdrom.bus && devices.preferredCdromBus) d.cdrom = { ...d.cdrom, bus: devices.preferredCdromBus };
    return d;
  });
}

/** The VMI spec with the preference's hints filled in where the spec leaves them unset. */
export function applyPreference(pref: PreferenceSpec, vmi: VirtualMachineInstanceSpec): VirtualMachineInstanceSpec {
  const spec = structuredClone(vmi);
  const domain = (spec.domain ??= {});
  if (pref.devices) {
    const devices = (domain.devices ??= {});
    const { preferredAutoattachGraphicsDevice: graphics, preferredAutoattachPodInterface: podInterface } = pref.devices;
    if (graphics !== undefined && devices.autoattachGraphicsDevice === undefined) devices.autoattachGraphicsDevice = graphics;
    if (podInterface !== undefined && devices.autoattachPodInterface === undefined) devices.autoattachPodInterface = podInterface;
    const multiQueue = pref.devices.preferredBlockMultiQueue;
    if (multiQueue !== undefined && devices.blockMultiQueue === undefined) devices.blockMultiQueue = multiQueue;
    if (devices.disks) devices.disks = applyDisks(pref, devices.disks);
    const model = pref.devices.preferredInterfaceModel;
    if (model && devices.interfaces) devices.interfaces = devices.interfaces.map((i) => (i.model ? i : { ...i, model }));
  }
  if (pref.features) {
    const features = (domain.features ??= {});
    // KubeVirt overwrites ACPI (its field is not a pointer) and fills the others.
    if (pref.features.preferredAcpi) features.acpi = { ...pref.features.preferredAcpi };
    if (pref.features.preferredApic && !features.apic) features.apic = { ...pref.features.preferredApic };
    if (pref.features.preferredSmm && !features.smm) features.smm = { ...pref.features.preferredSmm };
  }
  if (pref.firmware) applyFirmware(pref.firmware, spec);
  const machineType = pref.machine?.preferredMachineType;
  if (machineType && !domain.machine?.type) domain.machine = { ...(domain.machine ?? {}), type: machineType };
  const grace = pref.preferredTerminationGracePeriodSeconds;
  if (grace !== undefined && spec.terminationGracePeriodSeconds === undefined) spec.terminationGracePeriodSeconds = grace;
  return spec;
}

function applyFirmware(firmware: NonNullable<PreferenceSpec['firmware']>, spec: VirtualMachineInstanceSpec): void {
  const domain = spec.domain;
  const fw = (domain.firmware ??= {});
  const boot = (fw.bootloader ??= {});
  if (firmware.preferredUseBios && !boot.bios && !boot.efi) boot.bios = {};
  if (firmware.preferredUseBiosSerial !== undefined && boot.bios && boot.bios.useSerial === undefined)
    boot.bios.useSerial = firmware.preferredUseBiosSerial;
  if (!boot.efi && !boot.bios && firmware.preferredEfi) {
    boot.efi = { ...firmware.preferredEfi };
    return;
  }
  if (firmware.preferredUseEfi && !boot.efi && !boot.bios) boot.efi = {};
  if (firmware.preferredUseSecureBoot !== undefined && boot.efi && boot.efi.secureBoot === undefined)
    boot.efi.secureBoot = firmware.preferredUseSecureBoot;
  if (Object.keys(boot).length === 0) delete fw.bootloader;
}

/**
 * What the preference's requirements refuse, as [field, message] with KubeVirt's wording
 * (pkg/instancetype/preference/requirements), or undefined when they are met.
 */
export function unmetRequirement(
  pref: PreferenceSpec,
  it: InstancetypeSpec | undefined,
  vmi: VirtualMachineInstanceSpec,
): [string, string] | undefined {
  const cpu = pref.requirements?.cpu?.guest;
  if (cpu !== undefined) {
    if (it) {
      if (it.cpu.guest < cpu)
        return [
          'spec.instancetype',
          `insufficient CPU resources of ${it.cpu.guest} vCPU provided by instance type, preference requires ${cpu} vCPU`,
        ];
    } else {
      const given = vmi.domain?.cpu;
      if (!given) return ['spec.template.spec.domain.cpu', `no CPU resources provided by VirtualMachine, preference requires ${cpu} vCPU`];
      const preferred = (pref.cpu?.preferredCPUTopology ?? 'sockets').replace(/^prefer/, '').toLowerCase();
      const dim = preferred === 'cores' || preferred === 'threads' ? preferred : 'sockets';
      // spread and any count every vCPU.
      const have = ['spread', 'any'].includes(preferred)
        ? (given.sockets ?? 1) * (given.cores ?? 1) * (given.threads ?? 1)
        : (given[dim] ?? 0);
      if (have < cpu)
        return [
          `spec.template.spec.domain.cpu.${dim}`,
          `insufficient CPU resources of ${have} vCPU provided by VirtualMachine, preference requires ${cpu} vCPU provided as ${dim}`,
        ];
    }
  }
  const memory = pref.requirements?.memory?.guest;
  if (memory !== undefined) {
    const provided = it ? it.memory.guest : (vmi.domain?.memory?.guest ?? '0Mi');
    if ((parseQuantity(String(provided)) ?? 0) < (parseQuantity(String(memory)) ?? 0))
      return [
        it ? 'spec.instancetype' : 'spec.template.spec.domain.memory',
        `insufficient Memory resources of ${provided} provided by ${it ? 'instance type' : 'VirtualMachine'}, preference requires ${memory}`,
      ];
  }
  return undefined;
}

// Machine type, firmware and direct kernel boot. Boot order is per device
// (disks.ts), never <os><boot dev>, because libvirt forbids mixing the two.
import type { OsDraft, DomainBuilder } from './draft.js';

/** vkvm runs on x86_64 hosts only; the golden files must not depend on the build machine. */
const ARCH = 'x86_64';
export const DEFAULT_MACHINE = 'q35';

export const configureOs: DomainBuilder = (spec, _host, _runtime, draft) => {
  const os: OsDraft = { type: { $: { arch: ARCH, machine: spec.machineType ?? DEFAULT_MACHINE }, _: 'hvm' } };
  if (spec.firmware.kind === 'efi') {
    os.$ = { firmware: 'efi' };
    // Always say yes or no: libvirt's firmware auto-selection would otherwise
    // prefer Debian's secure-boot build with enrolled keys, which refuses unsigned guests.
    os.firmware = spec.firmware.secureBoot
      ? { feature: [{ $: { enabled: 'yes', name: 'secure-boot' } }, { $: { enabled: 'yes', name: 'enrolled-keys' } }] }
      : { feature: [{ $: { enabled: 'no', name: 'secure-boot' } }] };
  }
  // SeaBIOS writes to a screen; a VM without one shows its output only on serial, and only when asked.
  if (spec.firmware.kind === 'bios' && spec.firmware.useSerial) os.bios = { $: { useserial: 'yes' } };
  if (spec.kernelBoot) {
    os.kernel = spec.kernelBoot.kernelPath;
    if (spec.kernelBoot.initrdPath) os.initrd = spec.kernelBoot.initrdPath;
    if (spec.kernelBoot.cmdline) os.cmdline = spec.kernelBoot.cmdline;
  }
  draft.os = os;
};

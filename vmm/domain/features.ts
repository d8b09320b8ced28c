// Platform features. ACPI is what lets a graceful shutdown reach the guest;
// the APIC is needed for more than one vCPU; secure boot needs SMM so the
// guest cannot rewrite the firmware's variable store; under TCG, the size of
// the translation cache (libvirt >= 8.0 passes it to QEMU as tb-size).
import { TCG_TB_CACHE_MIB } from './accel.js';
import type { DomainBuilder, FeaturesDraft } from './draft.js';

export const configureFeatures: DomainBuilder = (spec, host, _runtime, draft) => {
  const features: FeaturesDraft = {};
  if (spec.acpi) features.acpi = {};
  features.apic = {};
  if (spec.firmware.kind === 'efi' && spec.firmware.secureBoot) features.smm = { $: { state: 'on' } };
  if (host.accelerator === 'tcg') features.tcg = { 'tb-cache': { $: { unit: 'MiB' }, _: TCG_TB_CACHE_MIB } };
  draft.features = features;
};

// Platform features. ACPI is what lets a graceful shutdown reach the guest;
// the APIC is needed for more than one vCPU; secure boot needs SMM so the
// guest cannot rewrite the firmware's variable store.
import type { DomainBuilder, FeaturesDraft } from './draft.js';

export const configureFeatures: DomainBuilder = (spec, _host, _runtime, draft) => {
  const features: FeaturesDraft = {};
  if (spec.acpi) features.acpi = {};
  features.apic = {};
  if (spec.firmware.kind === 'efi' && spec.firmware.secureBoot) features.smm = { $: { state: 'on' } };
  draft.features = features;
};

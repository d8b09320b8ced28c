import t from 'tap';
import { configureFeatures } from './features.js';
import { applyBuilder, testSpec } from '../testing/specs.js';
import type { VmSpec } from '../spec.js';

const featureCases: { name: string; spec: Partial<VmSpec>; want: object }[] = [
  { name: 'ACPI and APIC', spec: { acpi: true }, want: { acpi: {}, apic: {} } },
  { name: 'no ACPI when the spec turns it off', spec: { acpi: false }, want: { apic: {} } },
  {
    name: 'SMM for secure boot',
    spec: { firmware: { kind: 'efi', secureBoot: true } },
    want: { acpi: {}, apic: {}, smm: { $: { state: 'on' } } },
  },
  { name: 'no SMM for plain EFI', spec: { firmware: { kind: 'efi' } }, want: { acpi: {}, apic: {} } },
];

for (const c of featureCases) {
  t.test(`${c.name}`, async (t) => {
    t.same(applyBuilder(configureFeatures, testSpec(c.spec)).features, c.want);
  });
}

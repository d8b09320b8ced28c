import t from 'tap';
import { TCG_TB_CACHE_MIB } from './accel.js';
import { configureFeatures } from './features.js';
import { KVM_HOST, TCG_HOST, applyBuilder, testSpec } from '../testing/specs.js';
import type { VmSpec } from '../spec.js';
import type { HostCaps } from '../probe/virtualization.js';

const tbCache = { tcg: { 'tb-cache': { $: { unit: 'MiB' }, _: TCG_TB_CACHE_MIB } } };

const featureCases: { name: string; host: HostCaps; spec: Partial<VmSpec>; want: object }[] = [
  { name: 'ACPI and APIC', host: KVM_HOST, spec: { acpi: true }, want: { acpi: {}, apic: {} } },
  { name: 'no ACPI when the spec turns it off', host: KVM_HOST, spec: { acpi: false }, want: { apic: {} } },
  {
    name: 'SMM for secure boot',
    host: KVM_HOST,
    spec: { firmware: { kind: 'efi', secureBoot: true } },
    want: { acpi: {}, apic: {}, smm: { $: { state: 'on' } } },
  },
  { name: 'no SMM for plain EFI', host: KVM_HOST, spec: { firmware: { kind: 'efi' } }, want: { acpi: {}, apic: {} } },
  { name: 'TCG caps its translation cache', host: TCG_HOST, spec: { acpi: true }, want: { acpi: {}, apic: {}, ...tbCache } },
  {
    name: 'the same cache for a big TCG guest: translated code does not grow with RAM or vCPUs',
    host: TCG_HOST,
    spec: { acpi: true, memoryMiB: 16384, cpu: { sockets: 1, cores: 8, threads: 1 } },
    want: { acpi: {}, apic: {}, ...tbCache },
  },
];

for (const c of featureCases) {
  t.test(`${c.name}`, async (t) => {
    t.same(applyBuilder(configureFeatures, testSpec(c.spec), c.host).features, c.want);
  });
}

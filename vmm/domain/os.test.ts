import t from 'tap';
import { configureOs } from './os.js';
import { applyBuilder, testSpec } from '../testing/specs.js';
import type { VmSpec } from '../spec.js';

const hvm = (machine: string) => ({ $: { arch: 'x86_64', machine }, _: 'hvm' });

const cases: { name: string; spec: Partial<VmSpec>; want: object }[] = [
  { name: 'BIOS on q35 by default', spec: {}, want: { type: hvm('q35') } },
  { name: 'machine type from the spec', spec: { machineType: 'pc-q35-7.2' }, want: { type: hvm('pc-q35-7.2') } },
  {
    name: 'EFI without secure boot says so explicitly',
    spec: { firmware: { kind: 'efi' } },
    want: { $: { firmware: 'efi' }, type: hvm('q35'), firmware: { feature: [{ $: { enabled: 'no', name: 'secure-boot' } }] } },
  },
  {
    name: 'EFI with secure boot asks for enrolled keys',
    spec: { firmware: { kind: 'efi', secureBoot: true } },
    want: {
      $: { firmware: 'efi' },
      type: hvm('q35'),
      firmware: { feature: [{ $: { enabled: 'yes', name: 'secure-boot' } }, { $: { enabled: 'yes', name: 'enrolled-keys' } }] },
    },
  },
  {
    name: 'direct kernel boot with initrd and cmdline',
    spec: { kernelBoot: { kernelPath: '/k/vmlinuz', initrdPath: '/k/initrd', cmdline: 'console=ttyS0' } },
    want: { type: hvm('q35'), kernel: '/k/vmlinuz', initrd: '/k/initrd', cmdline: 'console=ttyS0' },
  },
  {
    name: 'direct kernel boot with the kernel alone',
    spec: { kernelBoot: { kernelPath: '/k/vmlinuz' } },
    want: { type: hvm('q35'), kernel: '/k/vmlinuz' },
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    t.same(applyBuilder(configureOs, testSpec(c.spec)).os, c.want);
  });
}

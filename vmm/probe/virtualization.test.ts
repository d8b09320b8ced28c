import t from 'tap';
import { decideAccelerator, parseCpuFlags } from './virtualization.js';

t.test('parseCpuFlags reads the flags line', async (t) => {
  const flags = parseCpuFlags('processor\t: 0\nflags\t\t: fpu vme svm sse\nbugs\t: x\n');
  t.same([...flags], ['fpu', 'vme', 'svm', 'sse']);
});

t.test('KVM only when /dev/kvm opens and the CPU has vmx or svm', async (t) => {
  t.match(decideAccelerator({ kvmDeviceUsable: true, hardwareVirtFlag: 'vmx' }, true), { accelerator: 'kvm' });
  t.match(
    decideAccelerator({ kvmDeviceUsable: true, hardwareVirtFlag: null }, true),
    { accelerator: 'tcg', reason: /neither vmx nor svm/ },
    'a PVM /dev/kvm without vmx/svm falls back to TCG',
  );
  t.match(decideAccelerator({ kvmDeviceUsable: false, hardwareVirtFlag: 'svm' }, true), {
    accelerator: 'tcg',
    reason: /missing or cannot be opened/,
  });
});

t.test('no accelerator when software emulation is disabled', async (t) => {
  t.throws(() => decideAccelerator({ kvmDeviceUsable: false, hardwareVirtFlag: null }, false), {
    kind: 'NoAccelerator',
    message: /software emulation is disabled/,
  });
});

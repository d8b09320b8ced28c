import t from 'tap';
import { evaluatePreflight, formatPreflight, hardFailures, type PreflightFacts } from './checks.js';

const GiB = 1024 ** 3;
const healthy: PreflightFacts = {
  executables: { 'qemu-system-x86_64': '/usr/bin/qemu-system-x86_64', 'qemu-img': '/usr/bin/qemu-img', libvirtd: '/usr/sbin/libvirtd' },
  virtqemud: null,
  qemuUserExists: true,
  cgroupProblem: null,
  virtualization: {
    accelerator: 'kvm',
    reason: '/dev/kvm usable and CPU has vmx',
    facts: { kvmDeviceUsable: true, hardwareVirtFlag: 'vmx' },
  },
  memoryAvailableBytes: 8 * GiB,
  imageCacheAvailableBytes: 50 * GiB,
  hugepagesTotal: 512,
  hugepagesFree: 512,
  ipForwarding: true,
};
const tcg = {
  accelerator: 'tcg' as const,
  reason: 'software emulation: /dev/kvm opens but the CPU advertises neither vmx nor svm',
  facts: { kvmDeviceUsable: true, hardwareVirtFlag: null },
};
const status = (f: PreflightFacts, allowSoftwareEmulation = true) =>
  Object.fromEntries(evaluatePreflight(f, { allowSoftwareEmulation }).map((c) => [c.condition, `${c.ok ? 'ok' : 'fail'}/${c.severity}`]));

t.test('a well-equipped KVM host passes every check', async (t) => {
  t.same(hardFailures(evaluatePreflight(healthy, { allowSoftwareEmulation: false })), []);
  t.ok(evaluatePreflight(healthy, { allowSoftwareEmulation: true }).every((c) => c.ok));
});

t.test('missing packages, user or cgroup controllers are hard failures with a fix', async (t) => {
  const checks = evaluatePreflight(
    {
      ...healthy,
      executables: { ...healthy.executables, 'qemu-img': null, libvirtd: null },
      virtqemud: '/usr/sbin/virtqemud',
      qemuUserExists: false,
      cgroupProblem: 'no v1 pids hierarchy',
    },
    { allowSoftwareEmulation: true },
  );
  t.match(hardFailures(checks), [
    {
      condition: 'VirtualizationPackages',
      message:
        /not found in PATH: qemu-img, libvirtd \(\/usr\/sbin\/virtqemud is there, but vkvm's launcher runs libvirtd\); install them with: apt-get install/,
    },
    { condition: 'QemuUser', message: /useradd/ },
    { condition: 'CgroupLayout', message: /no v1 pids hierarchy/ },
  ]);
  t.match(formatPreflight(checks), /\[FAIL\] VirtualizationPackages/);
});

t.test('KVM is soft (TCG fallback) unless software emulation is disabled; the rest are soft', async (t) => {
  const poor = {
    ...healthy,
    virtualization: tcg,
    memoryAvailableBytes: GiB / 2,
    imageCacheAvailableBytes: GiB,
    hugepagesTotal: 0,
    hugepagesFree: 0,
    ipForwarding: false,
  };
  t.match(status(poor), {
    KVMUsable: 'fail/soft',
    GuestMemory: 'fail/soft',
    ImageCacheSpace: 'fail/soft',
    HugePages: 'fail/soft',
    IPForwarding: 'fail/soft',
    VirtualizationPackages: 'ok/hard',
  });
  t.same(hardFailures(evaluatePreflight(poor, { allowSoftwareEmulation: true })), [], 'a TCG host with little room may still join');
  t.match(hardFailures(evaluatePreflight(poor, { allowSoftwareEmulation: false })), [
    { condition: 'KVMUsable', message: /neither vmx nor svm/ },
  ]);
});

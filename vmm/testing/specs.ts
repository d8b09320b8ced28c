// Shared test fixtures: a small valid spec and the two kinds of host.
import { VM_SPEC_VERSION, type VmSpec } from '../spec.js';
import type { HostCaps } from '../probe/virtualization.js';
import type { DomainRuntime } from '../domain/runtime.js';
import { newDomainDraft, type DomainBuilder, type DomainDraft } from '../domain/draft.js';

export const TCG_HOST: HostCaps = {
  accelerator: 'tcg',
  reason: 'software emulation: test',
  facts: { kvmDeviceUsable: false, hardwareVirtFlag: null },
};

export const KVM_HOST: HostCaps = {
  accelerator: 'kvm',
  reason: '/dev/kvm usable and CPU has vmx',
  facts: { kvmDeviceUsable: true, hardwareVirtFlag: 'vmx' },
};

/** A minimal valid spec: 1 vCPU, 128 MiB, BIOS, no disks; override what a test is about. */
export function testSpec(overrides: Partial<VmSpec> = {}): VmSpec {
  return {
    version: VM_SPEC_VERSION,
    uid: '0b6a3c1e-2d7a-4c8e-9b55-0d2f1e3a4b5c',
    name: 'default_test-vm',
    cpu: { sockets: 1, cores: 1, threads: 1 },
    memoryMiB: 128,
    firmware: { kind: 'bios' },
    disks: [],
    interfaces: [],
    guestAgent: false,
    acpi: true,
    labels: {},
    ...overrides,
  };
}

/** Runtime paths as a launcher under /run/vkvm/vms/<uid> would hand them over. */
export function testRuntime(overrides: Partial<DomainRuntime> = {}): DomainRuntime {
  return {
    emulatorPath: '/usr/bin/qemu-system-x86_64',
    consoleSocketPath: '/run/vkvm/vms/test/console.sock',
    guestAgentSocketPath: '/run/vkvm/vms/test/qga.sock',
    vncSocketPath: '/run/vkvm/vms/test/vnc.sock',
    disks: {},
    ...overrides,
  };
}

/** Runs one builder on a fresh draft, as buildDomainXml would. */
export function applyBuilder(
  builder: DomainBuilder,
  spec: VmSpec,
  host: HostCaps = TCG_HOST,
  runtime: DomainRuntime = testRuntime(),
): DomainDraft {
  const draft = newDomainDraft(spec, runtime);
  builder(spec, host, runtime, draft);
  return draft;
}

/** A QEMU identity no account has, for tests that check what prepared files are given to. */
export const TEST_QEMU_OWNER = { uid: 3_999_999, gid: 3_999_999 };

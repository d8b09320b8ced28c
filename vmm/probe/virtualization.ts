// Decides how guests can be accelerated on this host. /dev/kvm existing is not
// enough: on nested or paravirtual hypervisors (PVM) the device opens but
// ordinary guests hang, so KVM also needs the vmx/svm CPU flag.
import { constants } from 'node:fs';
import { open, readFile } from 'node:fs/promises';

export type Accelerator = 'kvm' | 'tcg';

export interface VirtualizationFacts {
  /** /dev/kvm opened read-write. */
  kvmDeviceUsable: boolean;
  /** The CPU advertises hardware virtualization (vmx or svm). */
  hardwareVirtFlag: 'vmx' | 'svm' | null;
}

export interface HostCaps {
  accelerator: Accelerator;
  /** Why this accelerator was chosen, for node conditions and logs. */
  reason: string;
  facts: VirtualizationFacts;
}

export class NoAcceleratorError extends Error {
  readonly kind = 'NoAccelerator';
}

export function parseCpuFlags(cpuinfo: string): Set<string> {
  const flags = new Set<string>();
  for (const line of cpuinfo.split('\n')) {
    const m = /^flags\s*:\s*(.*)$/.exec(line);
    if (m?.[1]) for (const f of m[1].trim().split(/\s+/)) flags.add(f);
  }
  return flags;
}

/**
 * Pure decision: KVM when both the device and the CPU flag are there;
 * otherwise TCG if the node allows software emulation.
 */
export function decideAccelerator(facts: VirtualizationFacts, allowSoftwareEmulation: boolean): HostCaps {
  if (facts.kvmDeviceUsable && facts.hardwareVirtFlag) {
    return { accelerator: 'kvm', reason: `/dev/kvm usable and CPU has ${facts.hardwareVirtFlag}`, facts };
  }
  const why = !facts.kvmDeviceUsable
    ? '/dev/kvm is missing or cannot be opened'
    : '/dev/kvm opens but the CPU advertises neither vmx nor svm (nested or paravirtual hypervisor)';
  if (!allowSoftwareEmulation) {
    throw new NoAcceleratorError(`hardware virtualization unusable (${why}) and software emulation is disabled`);
  }
  return { accelerator: 'tcg', reason: `software emulation: ${why}`, facts };
}

export async function readVirtualizationFacts(paths = { kvm: '/dev/kvm', cpuinfo: '/proc/cpuinfo' }): Promise<VirtualizationFacts> {
  let kvmDeviceUsable = false;
  try {
    const fh = await open(paths.kvm, constants.O_RDWR);
    await fh.close();
    kvmDeviceUsable = true;
  } catch {
    kvmDeviceUsable = false;
  }
  const flags = parseCpuFlags(await readFile(paths.cpuinfo, 'utf8'));
  const hardwareVirtFlag = flags.has('vmx') ? 'vmx' : flags.has('svm') ? 'svm' : null;
  return { kvmDeviceUsable, hardwareVirtFlag };
}

/** Probe the host. `allowSoftwareEmulation` defaults to true (TCG when KVM is unusable). */
export async function probeHostCaps(allowSoftwareEmulation = true): Promise<HostCaps> {
  return decideAccelerator(await readVirtualizationFacts(), allowSoftwareEmulation);
}

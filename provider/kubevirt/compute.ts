// A VMI's compute as KubeVirt reads it: guest memory = memory.guest, else
// requests.memory, else limits.memory (vmi mutator setGuestMemory); CPU
// topology as given, unset counts 1, and with none given all vCPUs are
// sockets = ceil(limits.cpu, else requests.cpu) (converter GetCPUTopology);
// limits.cpu also caps CPU time, as the launcher pod's limit does. Pure.
import { parseQuantity } from '../kube/quantity.js';
import type { CpuModel, CpuSpec } from '../../vmm/spec.js';
import type { Draft } from './draft.js';
import type { DomainSpec, Quantity } from './types.js';

const MIB = 2 ** 20;
export const RESOURCES = 'spec.domain.resources';
const R = RESOURCES;

/** A quantity's value, or undefined after reporting why it is unusable (absent is not reported). */
function quantity(d: Draft, raw: Quantity | undefined, path: string): number | undefined {
  if (raw === undefined || raw === null || raw === '') return undefined;
  // Only strings and numbers are quantities (String() of an object whose toString is not a function throws).
  const n = typeof raw === 'string' || typeof raw === 'number' ? parseQuantity(String(raw)) : null;
  if (n === null) return void d.report(path, 'FieldValueInvalid', `${JSON.stringify(raw)} is not a resource quantity`);
  if (n < 0) return void d.report(path, 'FieldValueInvalid', `${path} '${raw}': must be greater than or equal to 0.`);
  return n;
}

export interface Compute {
  cpu: CpuSpec;
  memoryMiB: number;
  /** KubeVirt fields behind the VmSpec's cpu counts and memory, for vmm's causes. */
  cpuField: string;
  memoryField: string;
}

export function translateCompute(d: Draft, domain: DomainSpec): Compute {
  const requests = domain.resources?.requests ?? {};
  const limits = domain.resources?.limits ?? {};
  const cpuLimit = quantity(d, limits.cpu, `${R}.limits.cpu`);
  const cpuRequest = quantity(d, requests.cpu, `${R}.requests.cpu`);
  if (cpuLimit && cpuRequest !== undefined && cpuRequest > cpuLimit) {
    d.report(
      `${R}.requests.cpu`,
      'FieldValueInvalid',
      `${R}.requests.cpu '${requests.cpu}' is greater than ${R}.limits.cpu '${limits.cpu}'`,
    );
  }

  const c = domain.cpu ?? {};
  const explicit = Boolean(c.cores || c.sockets || c.threads);
  const fromResources = cpuLimit !== undefined ? `${R}.limits.cpu` : `${R}.requests.cpu`;
  const cpu: CpuSpec = explicit
    ? { sockets: c.sockets || 1, cores: c.cores || 1, threads: c.threads || 1 }
    : { sockets: Math.max(1, Math.ceil(cpuLimit ?? cpuRequest ?? 1)), cores: 1, threads: 1 };
  if (c.model) {
    cpu.model = c.model === 'host-model' || c.model === 'host-passthrough' ? c.model : ({ named: c.model } satisfies CpuModel);
  }
  if (cpuLimit) cpu.limitMillicores = Math.round(cpuLimit * 1000);

  const memRequest = quantity(d, requests.memory, `${R}.requests.memory`);
  const memLimit = quantity(d, limits.memory, `${R}.limits.memory`);
  const guest = quantity(d, domain.memory?.guest, 'spec.domain.memory.guest');
  if (memLimit && memRequest !== undefined && memRequest > memLimit) {
    d.report(
      `${R}.requests.memory`,
      'FieldValueInvalid',
      `${R}.requests.memory '${requests.memory}' is greater than ${R}.limits.memory '${limits.memory}'`,
    );
  }
  if (memLimit && guest !== undefined && guest > memLimit) {
    d.report(
      'spec.domain.memory.guest',
      'FieldValueInvalid',
      `spec.domain.memory.guest '${domain.memory?.guest}' must be equal to or less than the memory limit ${R}.limits.memory '${limits.memory}'`,
    );
  }
  const [memoryField, bytes] =
    domain.memory?.guest != null
      ? ['spec.domain.memory.guest', guest]
      : requests.memory != null
        ? [`${R}.requests.memory`, memRequest]
        : limits.memory != null
          ? [`${R}.limits.memory`, memLimit]
          : [`${R}.requests.memory`, undefined];
  if (memoryField === `${R}.requests.memory` && requests.memory == null) {
    d.report(
      memoryField,
      'FieldValueRequired',
      `no memory requested, at least one of 'spec.domain.memory.guest', '${R}.requests.memory' or '${R}.limits.memory' must be set`,
    );
  }
  return {
    cpu,
    memoryMiB: bytes === undefined ? 0 : Math.ceil(bytes / MIB),
    cpuField: explicit ? 'spec.domain.cpu' : fromResources,
    memoryField,
  };
}

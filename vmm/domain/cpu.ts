// vCPU count and topology. The CPU model belongs to accel.ts, which knows
// whether host CPU modes are available.
import { vcpuCount } from '../spec.js';
import type { DomainBuilder } from './draft.js';

export const configureCpu: DomainBuilder = (spec, _host, _runtime, draft) => {
  const { sockets, cores, threads } = spec.cpu;
  draft.vcpu = { $: { placement: 'static' }, _: vcpuCount(spec.cpu) };
  draft.cpu.topology = { $: { sockets, cores, threads } };
};

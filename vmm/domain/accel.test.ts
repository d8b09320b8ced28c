import t from 'tap';
import { configureAccel } from './accel.js';
import { KVM_HOST, TCG_HOST, applyBuilder, testSpec } from '../testing/specs.js';
import type { CpuModel } from '../spec.js';
import type { HostCaps } from '../probe/virtualization.js';

const cases: { name: string; host: HostCaps; model?: CpuModel; want: object }[] = [
  { name: 'KVM defaults to host-passthrough', host: KVM_HOST, want: { $: { type: 'kvm' }, cpu: { $: { mode: 'host-passthrough' } } } },
  { name: 'KVM honours host-model', host: KVM_HOST, model: 'host-model', want: { $: { type: 'kvm' }, cpu: { $: { mode: 'host-model' } } } },
  {
    name: 'KVM honours a named model',
    host: KVM_HOST,
    model: { named: 'Skylake-Server' },
    want: {
      $: { type: 'kvm' },
      cpu: { $: { mode: 'custom', match: 'exact', check: 'none' }, model: { $: { fallback: 'forbid' }, _: 'Skylake-Server' } },
    },
  },
  {
    name: 'TCG defaults to qemu64',
    host: TCG_HOST,
    want: { $: { type: 'qemu' }, cpu: { $: { mode: 'custom', match: 'exact', check: 'none' }, model: { _: 'qemu64' } } },
  },
  {
    name: 'TCG replaces host-passthrough with a named model',
    host: TCG_HOST,
    model: 'host-passthrough',
    want: { $: { type: 'qemu' }, cpu: { $: { mode: 'custom' }, model: { _: 'qemu64' } } },
  },
  {
    name: 'TCG replaces host-model with a named model',
    host: TCG_HOST,
    model: 'host-model',
    want: { $: { type: 'qemu' }, cpu: { $: { mode: 'custom' }, model: { _: 'qemu64' } } },
  },
  {
    name: 'TCG honours a named model',
    host: TCG_HOST,
    model: { named: 'Nehalem' },
    want: { $: { type: 'qemu' }, cpu: { model: { _: 'Nehalem' } } },
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const spec = testSpec({ cpu: { sockets: 1, cores: 1, threads: 1, model: c.model } });
    t.match(applyBuilder(configureAccel, spec, c.host), c.want);
  });
}

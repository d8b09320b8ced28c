// The one place that decides between KVM and TCG: the domain type and the CPU
// model depend on it together. Host CPU modes only exist with KVM (libvirt
// rejects them for TCG domains), so under TCG they fall back to a named model.
import type { CpuModel } from '../spec.js';
import type { CpuDraft, DomainBuilder } from './draft.js';

/**
 * TCG default. Measured here: a Debian kernel reaches /init in ~8 s with qemu64
 * and ~15 s with `max` (more features to emulate). Guests that need
 * x86-64-v2 can ask for a named model such as Nehalem.
 */
export const TCG_DEFAULT_MODEL = 'qemu64';

/**
 * TCG's translation-block cache (`-accel tcg,tb-size`), in MiB. QEMU 7.2
 * reserves 1 GiB by default and keeps what it filled: the test guest's boot
 * left 54 MiB of translated code. When a smaller cache fills, QEMU flushes it
 * and translates again: at 32 MiB the boot was as fast, at 16 MiB 11 % slower
 * (`npm run bench -- tcg`, docs/benchmarks-log.md). One size for every guest
 * rather than one scaled by RAM or vCPUs: the code a guest runs does not grow
 * with its RAM, vCPUs share one cache, and a busy big guest that outgrows it
 * is slower, not broken. KVM runs guest code natively and gets no such cache.
 */
export const TCG_TB_CACHE_MIB = 32;

/** KVM default: vkvm does not live-migrate, so nothing is gained by hiding host features. */
export const KVM_DEFAULT_MODE = 'host-passthrough';

function namedModel(name: string): CpuDraft {
  // check='none': libvirt would otherwise compare the model against the host CPU, meaningless under TCG.
  return { $: { mode: 'custom', match: 'exact', check: 'none' }, model: { $: { fallback: 'forbid' }, _: name } };
}

function cpuFor(accelerator: 'kvm' | 'tcg', model: CpuModel | undefined): CpuDraft {
  if (typeof model === 'object') return namedModel(model.named);
  if (accelerator === 'tcg') return namedModel(TCG_DEFAULT_MODEL);
  return { $: { mode: model ?? KVM_DEFAULT_MODE } };
}

export const configureAccel: DomainBuilder = (spec, host, _runtime, draft) => {
  draft.$.type = host.accelerator === 'kvm' ? 'kvm' : 'qemu';
  Object.assign(draft.cpu, cpuFor(host.accelerator, spec.cpu.model));
};

// A VM's template with its instancetype and preference expanded into it: what
// the VM controller makes its VMI from, and what `virtctl expand` returns.
// KubeVirt's order (pkg/virt-controller/watch/vm setupVMIFromVM and
// pkg/instancetype/expand): volumes without a disk get one, then the
// instancetype is applied (a conflict refuses it), then the preference. An
// instancetype that asks for what vkvm cannot give, or that falls short of
// the preference's requirements, refuses the VM. Pure.
import { disksWithDefaults } from '../defaults.js';
import type { InstancetypeObject, InstancetypeSpec, PreferenceSpec, VirtualMachine, VirtualMachineSpec } from '../types.js';
import { applyInstancetype, conflictMessage, unsupportedInstancetypeFields } from './apply.js';
import { applyPreference, unmetRequirement } from './preference.js';

/** The instancetype and preference a VM's matchers resolved to (from its ControllerRevisions). */
export interface Resolved {
  instancetype?: InstancetypeObject<InstancetypeSpec>;
  preference?: InstancetypeObject<PreferenceSpec>;
}

export type Expanded = { ok: true; template: VirtualMachineSpec['template'] } | { ok: false; field: string; message: string };

/**
 * KubeVirt's annotations on a VMI naming its VM's instancetype and preference (annotations.Set, by the
 * matchers' kinds; an empty kind is the cluster-scoped one). On the VMI only, not in an expanded VM.
 */
export function nameAnnotations(vm: VirtualMachine): Record<string, string> {
  const out: Record<string, string> = {};
  const it = vm.spec.instancetype;
  const namespaced = (kind: string | undefined, singular: string) => [singular, `${singular}s`].includes((kind ?? '').toLowerCase());
  if (it?.name)
    out[namespaced(it.kind, 'virtualmachineinstancetype') ? 'kubevirt.io/instancetype-name' : 'kubevirt.io/cluster-instancetype-name'] =
      it.name;
  const p = vm.spec.preference;
  if (p?.name)
    out[namespaced(p.kind, 'virtualmachinepreference') ? 'kubevirt.io/preference-name' : 'kubevirt.io/cluster-preference-name'] = p.name;
  return out;
}

/** The VM's template with `r` expanded into it, or the first field that refuses it. */
export function expandTemplate(vm: VirtualMachine, r: Resolved): Expanded {
  const template = vm.spec.template;
  if (!r.instancetype && !r.preference) return { ok: true, template };
  const it = r.instancetype;
  if (it) {
    const unsupported = unsupportedInstancetypeFields(it.spec);
    if (unsupported.length > 0)
      return {
        ok: false,
        field: 'spec.instancetype',
        message: `${it.kind} ${it.metadata.name} asks for what vkvm does not provide: ${unsupported.join(', ')}`,
      };
  }
  const pref = r.preference?.spec;
  if (pref) {
    const unmet = unmetRequirement(pref, it?.spec, template.spec);
    if (unmet) return { ok: false, field: unmet[0], message: `failure checking preference requirements: ${unmet[1]}` };
  }
  let spec = structuredClone(template.spec);
  const disks = disksWithDefaults(spec, ...(pref?.devices?.preferredDiskBus ? [pref.devices.preferredDiskBus] : []));
  if (disks) spec.domain = { ...spec.domain, devices: { ...(spec.domain?.devices ?? {}), disks } };
  let annotations = { ...(template.metadata?.annotations ?? {}) };
  if (it) {
    const applied = applyInstancetype(it.spec, pref, spec, annotations, 'spec.template.spec');
    if (!('spec' in applied)) return { ok: false, field: applied.conflicts[0]!, message: conflictMessage(applied.conflicts) };
    spec = applied.spec;
    annotations = applied.annotations;
  }
  if (pref) {
    spec = applyPreference(pref, spec);
    annotations = { ...(pref.annotations ?? {}), ...annotations };
  }
  return { ok: true, template: { ...template, metadata: { ...(template.metadata ?? {}), annotations }, spec } };
}

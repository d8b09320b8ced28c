// The fields vkvm reads of a VMI spec (and of a VM's own spec), as trees
// derived from the subset table (crds/subset/), and a walk that lists every
// field present in an object but absent from a tree. Those fields are not
// errors: the VM runs without them and the controller reports the list as a
// condition and an event, so nothing the user asked for is dropped silently.
//
// A field "asks for nothing" when it is null, false, "", or an empty list
// (generated manifests are full of those); such fields are never reported.
// Fields whose *value* decides whether vkvm can honour them (features.smm,
// autoattach*, cdrom.readonly, ...) are accepted here and checked in
// translate.ts.
import type { FieldShape } from '../../crds/subset/field.js';
import { vmSpec } from '../../crds/subset/vm.js';
import { vmiSpec } from '../../crds/subset/vmi.js';

/** spec.* of a VirtualMachineInstance (and spec.template.spec of a VirtualMachine): what of it the subset table says vkvm reads. */
export const SUPPORTED_VMI_SPEC: FieldShape = vmiSpec.reads;

/** spec.* of a VirtualMachine: its own fields vkvm acts on (those of its template are SUPPORTED_VMI_SPEC's). */
export const SUPPORTED_VM_SPEC = vmSpec.reads;

/** True when `obj` has `key` set (not null or undefined), typed or not. */
export function hasField(obj: object, key: string): boolean {
  return (obj as unknown as Record<string, unknown>)[key] != null;
}

/** True when a field's value asks for something (see the header). */
export function asksForSomething(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === '') return false;
  return !(Array.isArray(value) && value.length === 0);
}

/**
 * Field paths under `path` present in `value` but not in `shape`, in document
 * order: `spec.domain.devices.gpus`, `spec.volumes[2].dataVolume`. An
 * unsupported field is reported once, not its children.
 */
export function unsupportedFields(value: unknown, shape: FieldShape, path: string): string[] {
  if (shape === true || !asksForSomething(value)) return [];
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) return [];
    return value.flatMap((item, i) => unsupportedFields(item, shape[0], `${path}[${i}]`));
  }
  if (typeof value !== 'object' || Array.isArray(value)) return [];
  const known = shape as { readonly [key: string]: FieldShape };
  return Object.entries(value as Record<string, unknown>).flatMap(([key, child]) => {
    const childShape = known[key];
    if (childShape === undefined) return asksForSomething(child) ? [`${path}.${key}`] : [];
    return unsupportedFields(child, childShape, `${path}.${key}`);
  });
}

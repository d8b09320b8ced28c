// An instancetype applied to a VMI spec, as KubeVirt's VMI applier does it
// (pkg/instancetype/apply): the vCPUs become the CPU topology the preference
// asks for, the memory becomes memory.guest (and a lower memory request under
// overcommitPercent), the model, node selector, ioThreadsPolicy and
// annotations are added.
// A field the VMI already sets is a conflict, named by its path, and nothing
// is applied then. Fields of the instancetype vkvm cannot honour refuse it.
// Pure; it works on a copy.
import { parseQuantity } from '../../kube/quantity.js';
import { unsupportedFields } from '../supported-fields.js';
import { instancetypeSpec as instancetypeTable } from '../../../crds/subset/instancetype.js';
import type { InstancetypeSpec, PreferenceSpec, VirtualMachineInstanceSpec } from '../types.js';

/** KubeVirt's message for a conflict (pkg/instancetype/conflict). */
export const conflictMessage = (paths: string[]): string => `VM field(s) ${paths.join(', ')} conflicts with selected instance type`;

/** Fields of an instancetype vkvm cannot honour, as paths under `at` (e.g. `spec.cpu.dedicatedCPUPlacement`). */
export function unsupportedInstancetypeFields(spec: InstancetypeSpec, at = 'spec'): string[] {
  return unsupportedFields(spec, instancetypeTable.reads, at);
}

/** The fields of a VMI spec (at `at`) that conflict with an instancetype, as KubeVirt's validateCPU and applyMemory list them. */
export function instancetypeConflicts(
  it: InstancetypeSpec,
  vmi: VirtualMachineInstanceSpec,
  annotations: Record<string, string>,
  at: string,
): string[] {
  const d = vmi.domain ?? {};
  const conflicts: string[] = [];
  for (const r of ['cpu'] as const) {
    if (d.resources?.requests?.[r] !== undefined) conflicts.push(`${at}.domain.resources.requests.${r}`);
    if (d.resources?.limits?.[r] !== undefined) conflicts.push(`${at}.domain.resources.limits.${r}`);
  }
  for (const f of ['sockets', 'cores', 'threads'] as const) if (d.cpu?.[f]) conflicts.push(`${at}.domain.cpu.${f}`);
  if (d.cpu?.model && it.cpu.model) conflicts.push(`${at}.domain.cpu.model`);
  // KubeVirt reports the first memory conflict only.
  const memory = [
    [d.memory !== undefined, 'domain.memory'],
    [d.resources?.requests?.memory !== undefined, 'domain.resources.requests.memory'],
    [d.resources?.limits?.memory !== undefined, 'domain.resources.limits.memory'],
  ] as const;
  const firstMemory = memory.find(([set]) => set);
  if (firstMemory) conflicts.push(`${at}.${firstMemory[1]}`);
  if (it.nodeSelector && vmi.nodeSelector) conflicts.push(`${at}.nodeSelector`);
  if (it.ioThreadsPolicy && d.ioThreadsPolicy) conflicts.push(`${at}.domain.ioThreadsPolicy`);
  // KubeVirt names an annotation conflict by `annotations.<key>` alone.
  for (const [key, value] of Object.entries(it.annotations ?? {}))
    if (annotations[key] !== undefined && annotations[key] !== value) conflicts.push(`annotations.${key}`);
  return conflicts;
}

/** The guest CPU topology of `vcpus` under the preference (KubeVirt's applyGuestCPUTopology). */
export function cpuTopology(vcpus: number, pref: PreferenceSpec | undefined): { sockets: number; cores: number; threads: number } {
  const t = { sockets: 1, cores: 1, threads: 1 };
  if (vcpus === 1) return t;
  const preferred = (pref?.cpu?.preferredCPUTopology ?? 'sockets').replace(/^prefer/, '').toLowerCase();
  if (preferred === 'cores') return { ...t, cores: vcpus };
  if (preferred === 'threads') return { ...t, threads: vcpus };
  if (preferred !== 'spread') return { ...t, sockets: vcpus }; // sockets, any
  const ratio = pref?.cpu?.spreadOptions?.ratio ?? (pref?.preferSpreadSocketToCoreRatio || 2);
  const across = pref?.cpu?.spreadOptions?.across ?? 'SocketsCores';
  if (across === 'CoresThreads') return { ...t, threads: ratio, cores: Math.floor(vcpus / ratio) };
  if (across === 'SocketsCoresThreads') return { threads: 2, cores: ratio, sockets: Math.floor(vcpus / 2 / ratio) };
  return { ...t, cores: ratio, sockets: Math.floor(vcpus / ratio) };
}

/** The memory request an overcommitted instancetype gives the pod, in bytes as a quantity string. */
function overcommittedRequest(guest: string | number, percent: number): string | undefined {
  const bytes = parseQuantity(String(guest));
  return bytes === null ? undefined : String(Math.floor(bytes * (1 - percent / 100)));
}

/**
 * The VMI spec and annotations (the template's) with the instancetype applied; `conflicts` lists the
 * fields of the VMI spec (under `at`) that refuse it, and then nothing is applied.
 */
export function applyInstancetype(
  it: InstancetypeSpec,
  pref: PreferenceSpec | undefined,
  vmi: VirtualMachineInstanceSpec,
  annotations: Record<string, string>,
  at: string,
): { conflicts: string[] } | { conflicts: []; spec: VirtualMachineInstanceSpec; annotations: Record<string, string> } {
  const conflicts = instancetypeConflicts(it, vmi, annotations, at);
  if (conflicts.length > 0) return { conflicts };
  const spec = structuredClone(vmi);
  spec.domain ??= {};
  spec.domain.cpu = {
    ...(spec.domain.cpu ?? {}),
    ...(it.cpu.model && !spec.domain.cpu?.model ? { model: it.cpu.model } : {}),
    ...cpuTopology(it.cpu.guest, pref),
  };
  spec.domain.memory = { guest: it.memory.guest };
  const percent = it.memory.overcommitPercent ?? 0;
  const request = percent > 0 ? overcommittedRequest(it.memory.guest, percent) : undefined;
  if (request)
    spec.domain.resources = { ...(spec.domain.resources ?? {}), requests: { ...(spec.domain.resources?.requests ?? {}), memory: request } };
  if (it.nodeSelector) spec.nodeSelector = { ...it.nodeSelector };
  if (it.ioThreadsPolicy) spec.domain.ioThreadsPolicy = it.ioThreadsPolicy;
  return { conflicts: [], spec, annotations: { ...(it.annotations ?? {}), ...annotations } };
}

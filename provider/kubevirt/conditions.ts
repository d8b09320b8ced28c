// Condition lists as Kubernetes keeps them: one entry per type, whose
// lastTransitionTime changes only when its status does. Pure.
import type { Condition } from './types.js';

export type ConditionInput<T extends string> = Omit<Condition<T>, 'lastTransitionTime' | 'lastProbeTime'>;

/** The list with `wanted` set (replacing any entry of its type), in the existing order. */
export function setCondition<T extends string>(
  list: readonly Condition<T>[] | undefined,
  wanted: ConditionInput<T>,
  now: Date,
): Condition<T>[] {
  const current = list?.find((c) => c.type === wanted.type);
  const next: Condition<T> = {
    type: wanted.type,
    status: wanted.status,
    lastProbeTime: null,
    lastTransitionTime:
      current && current.status === wanted.status && current.lastTransitionTime ? current.lastTransitionTime : now.toISOString(),
    ...(wanted.reason ? { reason: wanted.reason } : {}),
    ...(wanted.message ? { message: wanted.message } : {}),
  };
  return current ? (list ?? []).map((c) => (c.type === wanted.type ? next : c)) : [...(list ?? []), next];
}

export function removeCondition<T extends string>(list: readonly Condition<T>[] | undefined, type: T): Condition<T>[] {
  return (list ?? []).filter((c) => c.type !== type);
}

export function findCondition<T extends string>(list: readonly Condition<T>[] | undefined, type: T): Condition<T> | undefined {
  return list?.find((c) => c.type === type);
}

/** vkvm's UnsupportedFields condition message (on VMs and VMIs): the fields, so a change of them shows. */
export function unsupportedMessage(fields: readonly string[]): string {
  return `vkvm does not realize: ${fields.join(', ')}`;
}

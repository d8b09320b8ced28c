// Whether a derived pod status differs from the one the API server holds, so
// no-op writes are skipped. Only the fields the agent owns are compared; times
// are compared at the API's one-second precision and key order is ignored.
import type { V1PodStatus } from '@kubernetes/client-node';

const OWNED: (keyof V1PodStatus)[] = [
  'phase',
  'conditions',
  'hostIP',
  'hostIPs',
  'podIP',
  'podIPs',
  'startTime',
  'containerStatuses',
  'reason',
  'message',
];
const RFC3339 = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$/;

function canonical(value: unknown): unknown {
  if (value instanceof Date) return canonical(value.toISOString());
  if (typeof value === 'string') return value.replace(RFC3339, '$1Z');
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined && v !== null) out[k] = canonical(v);
    }
    return out;
  }
  return value;
}

/**
 * Conditions are compared by type and only for the types the agent sets:
 * others (DisruptionTarget from the API server, readiness gates) are theirs,
 * and the strategic merge patch that writes ours leaves them in place.
 */
function ownedConditions(s: V1PodStatus | undefined, types: Set<string>): V1PodStatus['conditions'] {
  return s?.conditions?.filter((c) => types.has(c.type)).sort((a, b) => a.type.localeCompare(b.type));
}

export function sameStatus(current: V1PodStatus | undefined, next: V1PodStatus): boolean {
  const types = new Set((next.conditions ?? []).map((c) => c.type));
  const pick = (s: V1PodStatus | undefined) => ({
    ...Object.fromEntries(OWNED.map((k) => [k, s?.[k]])),
    conditions: ownedConditions(s, types),
  });
  return JSON.stringify(canonical(pick(current))) === JSON.stringify(canonical(pick(next)));
}

/**
 * The status patch the agent writes: a strategic merge patch, as the kubelet
 * writes. Conditions merge by type, so conditions others set stay; fields a
 * condition no longer carries and a pod-level reason are nulled, or the merge
 * would keep the old ones. Container statuses carry no merge key in the pod's
 * patch schema, so they are replaced whole, as they must be. The uid is a
 * precondition: a status never lands on a newer pod of the same name.
 */
export function podStatusPatch(uid: string, status: V1PodStatus): object {
  const { conditions, ...rest } = status;
  return {
    metadata: { uid },
    status: {
      ...rest,
      reason: status.reason ?? null,
      message: status.message ?? null,
      ...(conditions && {
        conditions: conditions.map((c) => ({
          ...c,
          reason: c.reason ?? null,
          message: c.message ?? null,
          lastProbeTime: c.lastProbeTime ?? null,
        })),
      }),
    },
  };
}

// Whether a derived pod status differs from the one the API server holds, so
// no-op writes are skipped. Only the fields the agent owns are compared; times
// are compared at the API's one-second precision and key order is ignored.
import type { V1PodStatus } from '@kubernetes/client-node';

const OWNED: (keyof V1PodStatus)[] = ['phase', 'conditions', 'hostIP', 'hostIPs', 'podIP', 'podIPs', 'startTime', 'containerStatuses', 'reason', 'message'];
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

export function sameStatus(current: V1PodStatus | undefined, next: V1PodStatus): boolean {
  const pick = (s: V1PodStatus | undefined) => Object.fromEntries(OWNED.map((k) => [k, s?.[k]]));
  return JSON.stringify(canonical(pick(current))) === JSON.stringify(canonical(pick(next)));
}

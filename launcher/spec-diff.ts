// Which fields differ between the running VM's spec and a new one, and
// whether the launcher can apply them without restarting QEMU.
import type { VmSpec } from '../vmm/spec.js';

/** Fields applied in place: labels are only carried; the CPU quota and weight are cgroup writes. */
const LIVE_FIELDS = [/^labels(\.|$)/, /^cpu\.(limitMillicores|requestMillicores)$/];

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Leaf paths whose values differ, e.g. ['memoryMiB', 'disks[1].source.path']; a missing side counts as different. */
export function diffPaths(a: unknown, b: unknown, at = ''): string[] {
  if (Array.isArray(a) && Array.isArray(b)) {
    const out: string[] = [];
    for (let i = 0; i < Math.max(a.length, b.length); i++) out.push(...diffPaths(a[i], b[i], `${at}[${i}]`));
    return out;
  }
  if (isObject(a) && isObject(b)) {
    const out: string[] = [];
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const k of keys) out.push(...diffPaths(a[k], b[k], at ? `${at}.${k}` : k));
    return out;
  }
  return Object.is(a, b) ? [] : [at];
}

export interface SpecChange {
  /** Differences the launcher applies in place. */
  live: string[];
  /** Differences that need QEMU restarted with a new domain. */
  restart: string[];
}

export function classifyChange(running: VmSpec, desired: VmSpec): SpecChange {
  const change: SpecChange = { live: [], restart: [] };
  for (const p of diffPaths(running, desired)) (LIVE_FIELDS.some((re) => re.test(p)) ? change.live : change.restart).push(p);
  return change;
}

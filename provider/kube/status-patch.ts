// The merge patch that moves an object's status to `next` for the fields a
// controller owns: changed fields only, null for a field to remove, nothing
// at all when no owned field changed (status is written only when it changed);
// and the conditional write of such a patch (or a spec's) to a custom object.
import { isDeepStrictEqual } from 'node:util';
import type { CustomObjectsApi } from '@kubernetes/client-node';
import { mergePatch } from './client.js';

/** JSON's view of a value: undefined fields dropped, as the API server stores it. */
const normal = (v: unknown): unknown => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

export function statusPatch<S extends object>(
  current: S | undefined,
  next: S,
  owned: readonly (keyof S)[],
): Record<string, unknown> | undefined {
  const patch: Record<string, unknown> = {};
  for (const field of owned) {
    const before = normal(current?.[field]);
    const after = normal(next[field]);
    if (isDeepStrictEqual(before, after)) continue;
    patch[field as string] = after === undefined ? null : after;
  }
  return Object.keys(patch).length > 0 ? patch : undefined;
}

/**
 * `after` as a merge patch that replaces `before` whole: a merge patch merges
 * nested objects key by key, so every key `before` has and `after` lacks is
 * set to null (at every depth), or it would outlive the replacement.
 */
export function replacing(before: unknown, after: unknown): unknown {
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!isObject(before) || !isObject(after)) return after;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(before)) if (!(key in after) || after[key] === undefined) out[key] = null;
  for (const [key, value] of Object.entries(after)) if (value !== undefined) out[key] = replacing(before[key], value);
  return out;
}

/** Where a custom resource lives. */
export interface CustomResourceKind {
  group: string;
  version: string;
  plural: string;
}

/**
 * Merge-patches a custom object's `spec`, or its `status` through the status
 * subresource, conditional on `resourceVersion` when given (409 Conflict
 * when the object changed since it was read, so a decision made on a stale
 * copy is never written). Returns the new resourceVersion.
 */
export async function patchCustomObject(
  api: CustomObjectsApi,
  kind: CustomResourceKind,
  namespace: string,
  name: string,
  resourceVersion: string | undefined,
  part: { spec: Record<string, unknown> } | { status: Record<string, unknown> },
): Promise<string | undefined> {
  const params = { ...kind, namespace, name, body: { metadata: resourceVersion ? { resourceVersion } : {}, ...part } };
  const updated = (
    'status' in part
      ? await api.patchNamespacedCustomObjectStatus(params, mergePatch)
      : await api.patchNamespacedCustomObject(params, mergePatch)
  ) as { metadata?: { resourceVersion?: string } };
  return updated.metadata?.resourceVersion;
}

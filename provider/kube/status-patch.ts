// The merge patch that moves an object's status to `next` for the fields a
// controller owns: changed fields only, null for a field to remove, nothing
// at all when no owned field changed (status is written only when it changed).
import { isDeepStrictEqual } from 'node:util';

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

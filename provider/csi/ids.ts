// Volume and snapshot IDs, and list tokens. An ID names a file under the
// driver's directory, so parsing is the guard against a caller's path
// (`../x`): only `vol-` or `snap-` and 32 hex digits pass.
import { randomBytes } from 'node:crypto';

export type ObjectKind = 'volume' | 'snapshot';

const PREFIX: Record<ObjectKind, string> = { volume: 'vol-', snapshot: 'snap-' };
const ID = /^(vol|snap)-([0-9a-f]{32})$/;

export function newId(kind: ObjectKind, random: () => Buffer = () => randomBytes(16)): string {
  return PREFIX[kind] + random().toString('hex');
}

/** The kind of a well-formed ID, or undefined for anything else (which then names no object). */
export function parseId(id: string): ObjectKind | undefined {
  const m = ID.exec(id);
  if (!m) return undefined;
  return m[1] === 'vol' ? 'volume' : 'snapshot';
}

export const isVolumeId = (id: string): boolean => parseId(id) === 'volume';
export const isSnapshotId = (id: string): boolean => parseId(id) === 'snapshot';

/**
 * One page of `ids` (sorted) from `startingToken`, at most `maxEntries` (0:
 * all). The token is the first ID of the next page, so a page survives the
 * deletion of the entry it starts at; a token that is no ID of `kind` is
 * refused (undefined), which CSI answers with ABORTED.
 */
export function page(
  ids: readonly string[],
  kind: ObjectKind,
  startingToken: string,
  maxEntries: number,
): { ids: string[]; nextToken: string } | undefined {
  if (startingToken && parseId(startingToken) !== kind) return undefined;
  const sorted = [...ids].sort();
  const from = startingToken ? sorted.findIndex((id) => id >= startingToken) : 0;
  const rest = from < 0 ? [] : sorted.slice(from);
  if (maxEntries <= 0 || rest.length <= maxEntries) return { ids: rest, nextToken: '' };
  return { ids: rest.slice(0, maxEntries), nextToken: rest[maxEntries]! };
}

// Records every state a watched object passes through, for states too brief
// to wait for (a VMI that is Failed for the moment before its VM replaces it).
import { ListWatch, Watch } from '@kubernetes/client-node';
import type { Test } from 'tap';
import type { RawObject, Watched } from './watched.js';

export interface Recorder<T> {
  /** Every version seen so far, in order: the first list, then each added or updated object. */
  seen(): T[];
}

/** Starts recording `source` once its first list is in; stops in `t`'s teardown. */
export async function recordChanges<T>(t: Test, source: Watched<T>): Promise<Recorder<T>> {
  const seen: T[] = [];
  const lw = new ListWatch<RawObject>(
    source.path,
    new Watch(source.clients.kc),
    () => source.listRaw(),
    false,
    source.labelSelector,
    source.fieldSelector,
  );
  for (const verb of ['add', 'update'] as const) lw.on(verb, (o) => seen.push(source.fromRaw(o)));
  lw.on('error', (err: unknown) => t.comment(`recording ${source.describe} stopped: ${String(err)}`));
  t.teardown(() => lw.stop());
  await lw.start();
  return { seen: () => [...seen] };
}

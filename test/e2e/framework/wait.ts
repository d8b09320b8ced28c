// Waits with a deadline that fail with the last state seen. Kubernetes objects
// are waited for on a real list-then-watch (client-node's ListWatch), checked on
// every event; host state that sends no events (processes, HTTP answers, files,
// command output) is polled.
import { ListWatch, Watch } from '@kubernetes/client-node';
import type { RawObject, Watched } from './watched.js';

export const DEFAULT_DEADLINE_MS = 60_000;
const RESTART_DELAY_MS = 500;
const MESSAGE_LIMIT = 6000;

export interface WaitOptions {
  /** What is awaited, for the timeout's message: "Running and Ready". */
  what?: string;
  /** Fails after this long (default 60 s). */
  deadlineMs?: number;
}

const show = (v: unknown): string => {
  const s = typeof v === 'string' ? v : JSON.stringify(v, null, 1);
  return s === undefined ? 'undefined' : s.length > MESSAGE_LIMIT ? `${s.slice(0, MESSAGE_LIMIT)}…` : s;
};

/**
 * Watches `source` until `check` returns something for its objects (checked
 * once the first list is in, then after every batch of events), and resolves
 * with it. On the deadline it rejects naming the source, what was awaited and
 * every object last seen (and the last watch error, if any).
 */
function watchUntil<T, R>(source: Watched<T>, check: (objects: T[]) => R | undefined, opts: WaitOptions): Promise<R> {
  const deadlineMs = opts.deadlineMs ?? DEFAULT_DEADLINE_MS;
  return new Promise<R>((resolve, reject) => {
    let settled = false;
    let listed = false;
    let lastError: unknown;
    let restartTimer: NodeJS.Timeout | undefined;
    let scheduled = false;
    const list = async () => {
      const l = await source.listRaw();
      // The list's objects are added to the cache synchronously after this resolves: check once they all are.
      schedule();
      listed = true;
      return l;
    };
    const lw = new ListWatch<RawObject>(source.path, new Watch(source.clients.kc), list, false, source.labelSelector, source.fieldSelector);
    const current = (): T[] => lw.list().map((o) => source.fromRaw(o));
    const finish = (settle: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      clearTimeout(restartTimer);
      void lw.stop();
      settle();
    };
    const evaluate = (): void => {
      scheduled = false;
      if (settled || !listed) return;
      try {
        const result = check(current());
        if (result !== undefined) finish(() => resolve(result));
      } catch (err) {
        // A predicate reading a field not there yet: not satisfied; shown if the wait times out.
        lastError = err;
      }
    };
    // Events arrive in synchronous batches (a relist adds and deletes many at once): check after each batch.
    function schedule(): void {
      if (!scheduled) {
        scheduled = true;
        setImmediate(evaluate);
      }
    }
    const start = (): void => {
      lw.start().catch(restart);
    };
    function restart(err: unknown): void {
      if (settled) return;
      lastError = err;
      clearTimeout(restartTimer);
      restartTimer = setTimeout(start, RESTART_DELAY_MS);
    }
    for (const verb of ['add', 'update', 'delete'] as const) lw.on(verb, schedule);
    // ListWatch stops on any error but a 410 (which it relists for by itself).
    lw.on('error', restart);
    const deadline = setTimeout(() => {
      const objects = listed ? current() : undefined;
      const seen =
        objects === undefined
          ? 'nothing (never listed)'
          : objects.length === 0
            ? 'no object'
            : show(objects.map((o) => source.summarize(o)));
      const error = lastError === undefined ? '' : `; last error: ${lastError instanceof Error ? lastError.message : show(lastError)}`;
      finish(() =>
        reject(
          new Error(
            `timed out after ${deadlineMs / 1000} s waiting for ${source.describe}${opts.what ? `: ${opts.what}` : ''}; last seen: ${seen}${error}`,
          ),
        ),
      );
    }, deadlineMs);
    start();
  });
}

/** The first watched object for which `predicate` holds, once one does (as the watch delivered it). */
export function waitFor<T>(source: Watched<T>, predicate: (obj: T) => boolean, opts: WaitOptions = {}): Promise<T> {
  return watchUntil(source, (objects) => objects.find(predicate), opts);
}

/** All watched objects, once `predicate` holds for them together (a count, several names in a state…). */
export function waitForAll<T>(source: Watched<T>, predicate: (objects: T[]) => boolean, opts: WaitOptions = {}): Promise<T[]> {
  return watchUntil(source, (objects) => (predicate(objects) ? objects : undefined), opts);
}

/** Resolves (with []) once no watched object is left. */
export function waitForGone<T>(source: Watched<T>, opts: WaitOptions = {}): Promise<T[]> {
  return waitForAll(source, (objects) => objects.length === 0, { what: 'gone', ...opts });
}

/**
 * Polls `probe` until `done` holds for its result or the deadline passes: for
 * host state no watch reports. On timeout the error carries the last value
 * seen (and the last error the probe threw).
 */
export async function poll<T>(
  what: string,
  probe: () => Promise<T>,
  done: (v: T) => boolean,
  opts: { deadlineMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadlineMs = opts.deadlineMs ?? DEFAULT_DEADLINE_MS;
  const deadline = Date.now() + deadlineMs;
  let last: T | undefined;
  let lastErr: unknown;
  while (Date.now() < deadline) {
    try {
      last = await probe();
      if (done(last)) return last;
    } catch (err) {
      lastErr = err;
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 500));
  }
  throw new Error(
    `timed out after ${deadlineMs / 1000} s waiting for ${what}; last seen: ${show(last)}${lastErr ? `; last error: ${String(lastErr)}` : ''}`,
  );
}

/** The status of a condition of a Kubernetes object ("True", "False", "Unknown"), undefined if it has none. */
export function condition(
  obj: { status?: { conditions?: Array<{ type: string; status: string }> } } | undefined,
  type: string,
): string | undefined {
  return obj?.status?.conditions?.find((c) => c.type === type)?.status;
}

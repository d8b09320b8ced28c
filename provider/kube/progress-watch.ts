// A watch that notices when it has gone quiet. A watch whose connection is
// half-open (a proxy or NAT dropped it silently, a peer froze) delivers
// nothing and never ends: TCP keepalive is answered by whatever holds the
// connection, and the API server's own timeout (30-60 min) never reaches us.
// So the watch asks for bookmarks, which the API server sends about once a
// minute even when nothing changes, and ends with WatchStalledError when
// nothing at all (event or bookmark) arrived within the progress deadline.
// Its owner (ClusterInformer) then watches again from the last resource
// version, and gets what it missed. A collection nobody writes gets no
// bookmarks (the cacher has no newer version to report), so the watch also
// asks the API server to end it, cleanly, just before that deadline, as
// client-go's reflector asks for a timeout: a quiet watch is then renewed
// without an error, and only a silent connection stalls.
import { Watch, type KubeConfig } from '@kubernetes/client-node';

/** Two bookmark periods of the API server (its cacher sends one every minute). */
export const DEFAULT_WATCH_PROGRESS_DEADLINE_MS = 120_000;

export class WatchStalledError extends Error {
  readonly kind = 'WatchStalled';
  constructor(path: string, deadlineMs: number) {
    super(`the watch of ${path} delivered nothing (not even a bookmark) for ${deadlineMs / 1000} s; watching again`);
    this.name = 'WatchStalledError';
  }
}

type WatchArgs = Parameters<Watch['watch']>;

/** The API server ends the watch a tenth before the progress deadline (at least a second in). */
const serverTimeoutS = (progressDeadlineMs: number): number => Math.max(1, Math.floor((progressDeadlineMs * 0.9) / 1000));

export class ProgressWatch extends Watch {
  constructor(
    config: KubeConfig,
    private readonly progressDeadlineMs: number,
  ) {
    super(config);
  }

  override async watch(path: string, queryParams: WatchArgs[1], callback: WatchArgs[2], done: WatchArgs[3]): Promise<AbortController> {
    let finished = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (err: unknown): void => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      done(err);
    };
    // Armed before the request: a connection that hangs before the response headers is as stuck as a quiet one.
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => finish(new WatchStalledError(path, this.progressDeadlineMs)), this.progressDeadlineMs);
    };
    arm();
    const controller = await super.watch(
      path,
      { timeoutSeconds: serverTimeoutS(this.progressDeadlineMs), ...queryParams, allowWatchBookmarks: true },
      (type, obj, raw) => {
        arm();
        callback(type, obj, raw);
      },
      finish,
    );
    if (!finished) return controller;
    // Stalled before the response: the owner watches again already. Close this one, and never hand it over,
    // or the owner would take it for its current watch.
    controller.abort();
    return new Promise<never>(() => {});
  }
}

// The pod syncs' count and duration, by result (vkvm_pod_syncs_total, vkvm_pod_sync_duration_seconds).
import type { AgentMetrics } from '../metrics.js';

/** `sync`, measured: every run counted and timed, its error thrown on. */
export function measured(
  metrics: Pick<AgentMetrics, 'podSyncs' | 'podSyncDuration'>,
  sync: (key: string) => Promise<void>,
): (key: string) => Promise<void> {
  return async (key) => {
    const end = metrics.podSyncDuration.startTimer();
    try {
      await sync(key);
      metrics.podSyncs.inc({ result: 'success' });
      end({ result: 'success' });
    } catch (err) {
      metrics.podSyncs.inc({ result: 'error' });
      end({ result: 'error' });
      throw err;
    }
  };
}

// The kubelet's local storage eviction (eviction_manager.go,
// localStorageEviction), for VMs: every 10 s, the disk each running VM uses
// is measured against its pod's ephemeral-storage limit, and a VM over it is
// evicted, as the kubelet evicts a pod whose writable layers and logs
// outgrew the limit: reason Evicted, the kubelet's message, then the usage
// measured. What a VM uses is what its directory holds on disk: the root
// disk's overlay (a container's writable layer), empty disks, the cloud-init
// seed and the console logs.
import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { LauncherView } from '../launchers/registry.js';
import type { Logger } from '../log.js';
import { ephemeralStorageLimit } from './ephemeral-storage.js';
import type { PodLifecycle } from './lifecycle.js';

/** The kubelet's eviction monitoring interval. */
export const STORAGE_CHECK_INTERVAL_MS = 10_000;

export interface StorageEvictionOptions {
  /** The running VMs: their pod, and their directory. */
  running: () => Array<{ pod: V1Pod; dir: string }>;
  /** Bytes a directory takes on disk (dirUsageBytes; a fake in unit tests). */
  usageBytes: (dir: string) => Promise<number>;
  /** Evicts the pod with this message (its status's and its event's). */
  evict: (pod: V1Pod, message: string) => void;
  log: Logger;
}

/** Bytes the files under `dir` take on disk (allocated blocks: sparse disks count what they hold); 0 when it is gone. */
export async function dirUsageBytes(dir: string): Promise<number> {
  const names = await readdir(dir, { recursive: true }).catch(() => [] as string[]);
  const sizes = await Promise.all(
    [dir, ...names.map((n) => join(dir, n))].map((path) =>
      lstat(path).then(
        (st) => st.blocks * 512,
        // Removed meanwhile (a rotated log).
        () => 0,
      ),
    ),
  );
  return sizes.reduce((sum, n) => sum + n, 0);
}

/** The pods whose VM runs, with the VM's directory: what the storage check looks at. */
export function runningVms(
  lifecycles: Iterable<PodLifecycle>,
  podOf: (key: string) => V1Pod | undefined,
  launcherOf: (uid: string) => LauncherView<unknown> | undefined,
): Array<{ pod: V1Pod; dir: string }> {
  return [...lifecycles].flatMap((lc) => {
    const pod = podOf(lc.key);
    const view = launcherOf(lc.uid);
    return lc.state.kind === 'Running' && view?.live && pod?.metadata?.uid === lc.uid ? [{ pod, dir: view.dir }] : [];
  });
}

const mib = (bytes: number) => `${Math.ceil(bytes / 2 ** 20)}Mi`;

/** One pass over the running VMs with a limit (its owner runs it every STORAGE_CHECK_INTERVAL_MS); a VM it cannot measure is logged and checked again next time. */
export async function evictOverLimit(o: StorageEvictionOptions): Promise<void> {
  for (const { pod, dir } of o.running()) {
    const limit = ephemeralStorageLimit(pod);
    if (!limit) continue;
    try {
      const used = await o.usageBytes(dir);
      if (used <= limit.bytes) continue;
      o.evict(
        pod,
        `Pod ephemeral local storage usage exceeds the total limit of containers ${limit.quantity}. ` +
          `The VM's disks and logs use ${mib(used)}.`,
      );
    } catch (err) {
      o.log.warn({ err, pod: `${pod.metadata?.namespace}/${pod.metadata?.name}` }, 'could not measure the disk a VM uses');
    }
  }
}

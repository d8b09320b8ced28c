// The node agent's own Prometheus metrics, served on the kubelet port at
// /metrics (nodes/metrics) together with per-VM figures read at scrape time.
// Components increment the metrics of one AgentMetrics; nothing else
// registers into its registry.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface AgentMetrics {
  registry: Registry;
  /** One per syncPod(key) run; `error` runs are requeued with backoff. */
  podSyncs: Counter<'result'>;
  /** Wall time of one syncPod(key) run. */
  podSyncDuration: Histogram<'result'>;
  /** VMs whose launcher reports them running. Set, not incremented. */
  vmsRunning: Gauge;
  /** Launcher processes started, by whether they came up and answered Info. */
  launcherStarts: Counter<'result'>;
  /**
   * vkvm's own CPU for one VM start, in ms, observed when the VM runs: its
   * launcher and helpers (libvirtd, virsh, namespace set-up, what they
   * reaped) and the host commands of its network attach. QEMU and the guest
   * are not in it, nor the agent's own work (process_cpu_seconds_total).
   */
  cpuMsPerVmStart: Histogram;
  /** Kubelet API streaming sessions (exec, attach, log follow, port-forward, VNC) open, by endpoint. */
  streamingSessions: Gauge<'endpoint'>;
  /** Streaming sessions refused with 429, by the cap reached (node, user) and endpoint. */
  streamingSessionsRefused: Counter<'limit' | 'endpoint'>;
  /** The image store on disk (blobs and taken-out files), images in it, and how full its filesystem is; set by each GC pass. */
  imageStoreBytes: Gauge;
  imageStoreImages: Gauge;
  imageFsUsageRatio: Gauge;
  /** Image GC passes by result (below-threshold, freed, insufficient, error), images removed, bytes freed. */
  imageGcRuns: Counter<'result'>;
  imagesGarbageCollected: Counter;
  imageGcFreedBytes: Counter;
  /** The URL image cache: its bytes and entries (set by each of its GC passes), passes by result, entries removed, bytes freed. */
  imageCacheBytes: Gauge;
  imageCacheEntries: Gauge;
  imageCacheGcRuns: Counter<'result'>;
  imageCacheGarbageCollected: Counter;
  imageCacheGcFreedBytes: Counter;
  /** Bytes over an operator quota GC could not free, by cache (image-store, url-cache); downloads refused for the URL cache's. */
  imageQuotaExcessBytes: Gauge<'cache'>;
  imageCacheQuotaRefusals: Counter;
  /** Image pulls and downloads of VM starts under way or waiting their turn, beside the sync workers. Set, not incremented. */
  vmPreparations: Gauge;
  /** Pods the node failed, by cause: its admission under pressure or short of resources, or ephemeral storage over the limit. */
  podEvictions: Counter<'cause'>;
}

/**
 * A registry with Node's default process metrics and the agent's metrics.
 * Tests build their own; the agent uses `agentMetrics`.
 */
export function createAgentMetrics(): AgentMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  return {
    registry,
    podSyncs: new Counter({
      name: 'vkvm_pod_syncs_total',
      help: 'Pod sync runs by result (success, error).',
      labelNames: ['result'] as const,
      registers,
    }),
    podSyncDuration: new Histogram({
      name: 'vkvm_pod_sync_duration_seconds',
      help: 'Duration of pod sync runs in seconds, by result (success, error).',
      labelNames: ['result'] as const,
      // A sync that creates a VM waits for its launcher and libvirt daemon: seconds.
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    }),
    vmsRunning: new Gauge({ name: 'vkvm_vms_running', help: 'VMs currently running on this node.', registers }),
    launcherStarts: new Counter({
      name: 'vkvm_launcher_starts_total',
      help: 'Launcher process starts by result (success, error).',
      labelNames: ['result'] as const,
      registers,
    }),
    cpuMsPerVmStart: new Histogram({
      name: 'vkvm_cpu_ms_per_vm_start',
      help: 'CPU milliseconds vkvm spent on one VM start besides QEMU: the launcher and its helpers until the VM ran, and the host commands of its network attach.',
      buckets: [25, 50, 100, 150, 200, 300, 400, 600, 800, 1200, 2000, 5000],
      registers,
    }),
    streamingSessions: new Gauge({
      name: 'vkvm_streaming_sessions',
      help: 'Kubelet API streaming sessions open, by endpoint (exec, attach, log, portForward, vnc, vmi-console).',
      labelNames: ['endpoint'] as const,
      registers,
    }),
    streamingSessionsRefused: new Counter({
      name: 'vkvm_streaming_sessions_refused_total',
      help: 'Kubelet API streaming sessions refused with 429, by the cap reached (node, user) and endpoint (exec, attach, log, portForward, vnc).',
      labelNames: ['limit', 'endpoint'] as const,
      registers,
    }),
    imageStoreBytes: new Gauge({
      name: 'vkvm_image_store_bytes',
      help: 'Bytes of the image store on disk: blobs and the files taken out of images.',
      registers,
    }),
    imageStoreImages: new Gauge({ name: 'vkvm_image_store_images', help: 'Images (repository@digest) in the image store.', registers }),
    imageFsUsageRatio: new Gauge({
      name: 'vkvm_image_filesystem_usage_ratio',
      help: 'How full the filesystem holding the image store is (0-1), as image garbage collection sees it.',
      registers,
    }),
    imageGcRuns: new Counter({
      name: 'vkvm_image_gc_runs_total',
      help: 'Image garbage collection passes by result (below-threshold, freed, insufficient, error).',
      labelNames: ['result'] as const,
      registers,
    }),
    imagesGarbageCollected: new Counter({
      name: 'vkvm_image_garbage_collected_total',
      help: 'Images removed by image garbage collection.',
      registers,
    }),
    imageGcFreedBytes: new Counter({
      name: 'vkvm_image_gc_freed_bytes_total',
      help: 'Bytes image garbage collection freed on the filesystem holding the image store.',
      registers,
    }),
    imageQuotaExcessBytes: new Gauge({
      name: 'vkvm_image_quota_excess_bytes',
      help: 'Bytes over the operator quota (--image-store-quota-mib, --image-cache-quota-mib) that garbage collection could not free (in use or too new), by cache (image-store, url-cache).',
      labelNames: ['cache'] as const,
      registers,
    }),
    imageCacheQuotaRefusals: new Counter({
      name: 'vkvm_image_cache_quota_refusals_total',
      help: 'URL image downloads refused because the URL image cache stayed over --image-cache-quota-mib.',
      registers,
    }),
    imageCacheBytes: new Gauge({ name: 'vkvm_image_cache_bytes', help: 'Bytes of downloaded URL images in the image cache.', registers }),
    imageCacheEntries: new Gauge({ name: 'vkvm_image_cache_entries', help: 'Downloaded URL images in the image cache.', registers }),
    imageCacheGcRuns: new Counter({
      name: 'vkvm_image_cache_gc_runs_total',
      help: 'URL image cache garbage collection passes by result (below-threshold, freed, insufficient, error).',
      labelNames: ['result'] as const,
      registers,
    }),
    imageCacheGarbageCollected: new Counter({
      name: 'vkvm_image_cache_garbage_collected_total',
      help: 'Downloaded URL images removed by garbage collection.',
      registers,
    }),
    imageCacheGcFreedBytes: new Counter({
      name: 'vkvm_image_cache_gc_freed_bytes_total',
      help: 'Bytes URL image cache garbage collection freed (entries removed and partial downloads of dead processes).',
      registers,
    }),
    vmPreparations: new Gauge({
      name: 'vkvm_start_preparations',
      help: 'Image pulls and URL downloads of VM starts under way or waiting their turn.',
      registers,
    }),
    podEvictions: new Counter({
      name: 'vkvm_pod_evictions_total',
      help: 'Pods the node failed, by cause (admission: Evicted, refused under node pressure; resources: OutOfcpu, OutOfmemory, OutOfpods..., refused as the node could not hold them; not-a-vm: NotAVirtualMachine, a DaemonSet pod not meant for vkvm nodes; ephemeral-storage: Evicted, over the limit).',
      labelNames: ['cause'] as const,
      registers,
    }),
  };
}

/** The agent's metrics: the pod controller and the kubelet API share this one. */
export const agentMetrics: AgentMetrics = createAgentMetrics();

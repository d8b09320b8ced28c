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
  /** Kubelet API streaming sessions (exec, attach, log follow) open, by endpoint. */
  streamingSessions: Gauge<'endpoint'>;
  /** Streaming sessions refused with 429, by the cap reached (node, user) and endpoint. */
  streamingSessionsRefused: Counter<'limit' | 'endpoint'>;
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
      help: 'Kubelet API streaming sessions open, by endpoint (exec, attach, log).',
      labelNames: ['endpoint'] as const,
      registers,
    }),
    streamingSessionsRefused: new Counter({
      name: 'vkvm_streaming_sessions_refused_total',
      help: 'Kubelet API streaming sessions refused with 429, by the cap reached (node, user) and endpoint (exec, attach, log).',
      labelNames: ['limit', 'endpoint'] as const,
      registers,
    }),
  };
}

/** The agent's metrics: the pod controller and the kubelet API share this one. */
export const agentMetrics: AgentMetrics = createAgentMetrics();

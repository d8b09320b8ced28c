// /metrics/resource: the kubelet's resource metrics (pkg/kubelet/metrics/
// collectors/resource_metrics.go), the endpoint metrics-server scrapes. Same
// names, help, labels and sample timestamps: metrics-server computes CPU rates
// from the timestamps, and drops a container whose CPU or memory is zero.
// Written by hand because prom-client cannot emit sample timestamps.
import type { NodeUsage } from '../node/usage.js';
import type { VmCpuMemory } from './vm-access.js';

export const PROMETHEUS_TEXT = 'text/plain; version=0.0.4; charset=utf-8';

interface Sample {
  labels?: Record<string, string>;
  value: number;
  timestampMs?: number;
}

interface Family {
  name: string;
  help: string;
  type: 'counter' | 'gauge';
  samples: Sample[];
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

/** Prometheus text format 0.0.4, families sorted by name and labels by name, as Go's client writes them. */
export function formatFamilies(families: Family[]): string {
  let out = '';
  // Like Go's client, a family without samples is left out.
  for (const f of families.filter((f) => f.samples.length > 0).sort((a, b) => a.name.localeCompare(b.name))) {
    out += `# HELP ${f.name} ${f.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}\n# TYPE ${f.name} ${f.type}\n`;
    for (const s of f.samples) {
      const labels = Object.entries(s.labels ?? {})
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => `${k}="${escapeLabel(v)}"`)
        .join(',');
      out += `${f.name}${labels ? `{${labels}}` : ''} ${s.value}${s.timestampMs === undefined ? '' : ` ${s.timestampMs}`}\n`;
    }
  }
  return out;
}

export interface ResourceMetricsInput {
  /** Absent when it could not be read. */
  node?: NodeUsage;
  vms: VmCpuMemory[];
  /** Reading the node or the VMs failed: scrape_error and resource_scrape_error are 1. */
  failed: boolean;
}

export function formatResourceMetrics(input: ResourceMetricsInput): string {
  const family = (name: string, type: Family['type'], help: string): Family => ({ name, type, help, samples: [] });
  const f = {
    nodeCpu: family('node_cpu_usage_seconds_total', 'counter', '[STABLE] Cumulative cpu time consumed by the node in core-seconds'),
    nodeMemory: family('node_memory_working_set_bytes', 'gauge', '[STABLE] Current working set of the node in bytes'),
    containerStart: family('container_start_time_seconds', 'gauge', '[STABLE] Start time of the container since unix epoch in seconds'),
    containerCpu: family(
      'container_cpu_usage_seconds_total',
      'counter',
      '[STABLE] Cumulative cpu time consumed by the container in core-seconds',
    ),
    containerMemory: family('container_memory_working_set_bytes', 'gauge', '[STABLE] Current working set of the container in bytes'),
    podCpu: family('pod_cpu_usage_seconds_total', 'counter', '[STABLE] Cumulative cpu time consumed by the pod in core-seconds'),
    podMemory: family('pod_memory_working_set_bytes', 'gauge', '[STABLE] Current working set of the pod in bytes'),
    scrapeError: family(
      'scrape_error',
      'gauge',
      '[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container metrics, 0 otherwise',
    ),
    resourceScrapeError: family(
      'resource_scrape_error',
      'gauge',
      '[STABLE] 1 if there was an error while getting container metrics, 0 otherwise',
    ),
  };
  if (input.node) {
    const timestampMs = input.node.time.getTime();
    f.nodeCpu.samples.push({ value: input.node.cpuUsageCoreNanoSeconds / 1e9, timestampMs });
    f.nodeMemory.samples.push({ value: input.node.memoryWorkingSetBytes, timestampMs });
  }
  for (const vm of input.vms) {
    const timestampMs = vm.time.getTime();
    const pod = { pod: vm.pod, namespace: vm.namespace };
    const container = { container: vm.container, ...pod };
    f.containerStart.samples.push({ labels: container, value: vm.startTime.getTime() / 1000 });
    f.containerCpu.samples.push({ labels: container, value: vm.cpuUsageCoreNanoSeconds / 1e9, timestampMs });
    f.containerMemory.samples.push({ labels: container, value: vm.memoryWorkingSetBytes, timestampMs });
    // One container per pod: the pod's figures are the container's.
    f.podCpu.samples.push({ labels: pod, value: vm.cpuUsageCoreNanoSeconds / 1e9, timestampMs });
    f.podMemory.samples.push({ labels: pod, value: vm.memoryWorkingSetBytes, timestampMs });
  }
  f.scrapeError.samples.push({ value: input.failed ? 1 : 0 });
  f.resourceScrapeError.samples.push({ value: input.failed ? 1 : 0 });
  return formatFamilies(Object.values(f));
}

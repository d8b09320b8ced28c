// The kubelet Summary API (k8s.io/kubelet/pkg/apis/stats/v1alpha1): CPU and
// memory of the node and of one pod per VM, whose one container is the VM,
// and each pod's published CSI volumes (provider/csi-node/volume-stats.ts).
// Fields we cannot measure are omitted, as the kubelet omits them.
import type { VolumeStats } from '../csi-node/volume-stats.js';
import type { NodeUsage } from '../node/usage.js';
import type { VmCpuMemory } from './vm-access.js';

export interface CPUStats {
  time: string;
  /** Average over the interval since the previous sample; absent on the first. */
  usageNanoCores?: number;
  usageCoreNanoSeconds: number;
}

export interface MemoryStats {
  time: string;
  /** Limit (or node capacity) minus working set; absent without a limit. */
  availableBytes?: number;
  usageBytes: number;
  workingSetBytes: number;
  rssBytes: number;
}

export interface ContainerStats {
  name: string;
  startTime: string;
  cpu: CPUStats;
  memory: MemoryStats;
}

export interface PodStats {
  podRef: { name: string; namespace: string; uid: string };
  startTime: string;
  containers: ContainerStats[];
  cpu: CPUStats;
  memory: MemoryStats;
  /** Absent when the pod has no volume with stats, as the kubelet's omitempty. */
  volume?: VolumeStats[];
}

export interface Summary {
  node: { nodeName: string; startTime: string; cpu: CPUStats; memory: MemoryStats };
  pods: PodStats[];
}

/** metav1.Time's JSON form: RFC 3339 in UTC, whole seconds. */
export function rfc3339(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * usageNanoCores from successive cumulative CPU samples, per key (a pod UID,
 * or NODE_KEY). Every summary request samples, like the kubelet's CRI stats
 * provider; samples closer together than `minIntervalMs` reuse the last rate
 * rather than divide tiny deltas, so two scrapers in a row see sane values.
 */
export class CpuRates {
  private readonly last = new Map<string, { cpuNs: number; timeMs: number; nanoCores?: number }>();

  constructor(private readonly minIntervalMs = 1000) {}

  /** Records a sample; the rate since the previous one, or undefined for a first sample or after a counter reset. */
  update(key: string, cpuNs: number, time: Date): number | undefined {
    const timeMs = time.getTime();
    const prev = this.last.get(key);
    if (prev && cpuNs >= prev.cpuNs && timeMs - prev.timeMs < Math.max(1, this.minIntervalMs)) return prev.nanoCores;
    // A restarted VM starts a new cgroup: its counter went backwards.
    const nanoCores = prev && cpuNs >= prev.cpuNs ? Math.round(((cpuNs - prev.cpuNs) * 1000) / (timeMs - prev.timeMs)) : undefined;
    this.last.set(key, { cpuNs, timeMs, ...(nanoCores === undefined ? {} : { nanoCores }) });
    return nanoCores;
  }

  /** Forgets keys not in `keys` (pods that are gone). */
  retain(keys: Set<string>): void {
    for (const key of this.last.keys()) if (!keys.has(key)) this.last.delete(key);
  }
}

export const NODE_KEY = '';

export interface SummaryInput {
  nodeName: string;
  nodeStartTime: Date;
  node: NodeUsage;
  vms: VmCpuMemory[];
  /** The pod's volumes as last read (cached: the summary never waits on a driver); none when absent. */
  volumesOf?: (podUid: string) => VolumeStats[];
}

function cpuStats(time: Date, cpuNs: number, nanoCores: number | undefined): CPUStats {
  return {
    time: rfc3339(time),
    ...(nanoCores === undefined ? {} : { usageNanoCores: nanoCores }),
    usageCoreNanoSeconds: Math.round(cpuNs),
  };
}

function memoryStats(
  time: Date,
  m: { usageBytes: number; workingSetBytes: number; rssBytes: number; availableBytes: number | undefined },
): MemoryStats {
  return {
    time: rfc3339(time),
    ...(m.availableBytes === undefined ? {} : { availableBytes: m.availableBytes }),
    usageBytes: m.usageBytes,
    workingSetBytes: m.workingSetBytes,
    rssBytes: m.rssBytes,
  };
}

/** Builds the summary and advances `rates` by one sample per pod and for the node. */
export function buildSummary(input: SummaryInput, rates: CpuRates): Summary {
  const { node } = input;
  const nodeCpu = cpuStats(node.time, node.cpuUsageCoreNanoSeconds, rates.update(NODE_KEY, node.cpuUsageCoreNanoSeconds, node.time));
  const nodeMemory = memoryStats(node.time, {
    usageBytes: node.memoryUsageBytes,
    workingSetBytes: node.memoryWorkingSetBytes,
    rssBytes: node.memoryRSSBytes,
    availableBytes: node.memoryAvailableBytes,
  });
  const pods = input.vms.map((vm): PodStats => {
    const cpu = cpuStats(vm.time, vm.cpuUsageCoreNanoSeconds, rates.update(vm.podUID, vm.cpuUsageCoreNanoSeconds, vm.time));
    const memory = memoryStats(vm.time, {
      usageBytes: vm.memoryUsageBytes,
      workingSetBytes: vm.memoryWorkingSetBytes,
      rssBytes: vm.memoryRSSBytes,
      availableBytes: vm.memoryLimitBytes === undefined ? undefined : Math.max(0, vm.memoryLimitBytes - vm.memoryWorkingSetBytes),
    });
    const startTime = rfc3339(vm.startTime);
    const volume = input.volumesOf?.(vm.podUID) ?? [];
    return {
      podRef: { name: vm.pod, namespace: vm.namespace, uid: vm.podUID },
      startTime,
      // The VM is the pod's only container: pod and container figures are the same cgroup's.
      containers: [{ name: vm.container, startTime, cpu, memory }],
      cpu,
      memory,
      ...(volume.length ? { volume } : {}),
    };
  });
  rates.retain(new Set([NODE_KEY, ...input.vms.map((vm) => vm.podUID)]));
  return { node: { nodeName: input.nodeName, startTime: rfc3339(input.nodeStartTime), cpu: nodeCpu, memory: nodeMemory }, pods };
}

// Resource usage endpoints (nodes/stats and nodes/metrics):
//   GET /stats/summary     the kubelet Summary API: CPU, memory and published volumes
//   GET /metrics/resource  the kubelet's resource metrics, which metrics-server scrapes
//   GET /metrics           the agent's own metrics plus per-VM usage and the kubelet's volume gauges
// Every request reads fresh CPU and memory figures; volume figures come from
// the CSI node side's cache, which its drivers refresh periodically.
import type { FastifyInstance } from 'fastify';
import { Counter, Gauge, Registry } from 'prom-client';
import type { NodeUsage } from '../../node/usage.js';
import { PROMETHEUS_TEXT, formatResourceMetrics } from '../resource-metrics.js';
import { CpuRates, buildSummary } from '../summary.js';
import type { VmCpuMemory } from '../vm-access.js';
import { VOLUME_GAUGES, volumeSamples, type VolumeStats } from '../../csi-node/volume-stats.js';

export interface NodeStatsSource {
  /** When the host booted: the node's startTime. */
  startTime: Date;
  readUsage(): Promise<NodeUsage>;
}

export interface StatsRoutesOptions {
  nodeName: string;
  node: NodeStatsSource;
  listVmUsage: () => Promise<VmCpuMemory[]>;
  /** The agent's own metrics (provider/metrics.ts), served first on /metrics. */
  registry: Registry;
  /** Published volumes' usage as last read (provider/csi-node/volume-stats-cache.ts); none when absent. */
  volumeStats?: { forPod(podUid: string): VolumeStats[]; all(): VolumeStats[] };
  /** Summary requests closer together than this reuse the previous usageNanoCores; default 1000. */
  minRateIntervalMs?: number;
}

const cpuSchema = {
  type: 'object',
  properties: { time: { type: 'string' }, usageNanoCores: { type: 'integer' }, usageCoreNanoSeconds: { type: 'integer' } },
} as const;
const memorySchema = {
  type: 'object',
  properties: {
    time: { type: 'string' },
    availableBytes: { type: 'integer' },
    usageBytes: { type: 'integer' },
    workingSetBytes: { type: 'integer' },
    rssBytes: { type: 'integer' },
  },
} as const;
const podRefSchema = {
  type: 'object',
  properties: { name: { type: 'string' }, namespace: { type: 'string' }, uid: { type: 'string' } },
} as const;
const integer = { type: 'integer' } as const;
const volumeSchema = {
  type: 'object',
  properties: {
    time: { type: 'string' },
    name: { type: 'string' },
    pvcRef: { type: 'object', properties: { name: { type: 'string' }, namespace: { type: 'string' } } },
    capacityBytes: integer,
    usedBytes: integer,
    availableBytes: integer,
    inodes: integer,
    inodesUsed: integer,
    inodesFree: integer,
  },
} as const;
const summarySchema = {
  type: 'object',
  properties: {
    node: {
      type: 'object',
      properties: { nodeName: { type: 'string' }, startTime: { type: 'string' }, cpu: cpuSchema, memory: memorySchema },
    },
    pods: {
      type: 'array',
      items: {
        type: 'object',
        properties: {
          podRef: podRefSchema,
          startTime: { type: 'string' },
          containers: {
            type: 'array',
            items: {
              type: 'object',
              properties: { name: { type: 'string' }, startTime: { type: 'string' }, cpu: cpuSchema, memory: memorySchema },
            },
          },
          cpu: cpuSchema,
          memory: memorySchema,
          volume: { type: 'array', items: volumeSchema },
        },
      },
    },
  },
} as const;

/** Per-VM figures for /metrics, in a registry built for one scrape so gone VMs leave no series behind. */
function vmRegistry(vms: VmCpuMemory[], failed: boolean): Registry {
  const registry = new Registry();
  const registers = [registry];
  const labelNames = ['namespace', 'pod', 'uid'] as const;
  const cpu = new Counter({
    name: 'vkvm_vm_cpu_seconds_total',
    help: "CPU time used by the VM's cgroup (launcher, libvirt daemon, QEMU), in core-seconds.",
    labelNames,
    registers,
  });
  const memory = new Gauge({
    name: 'vkvm_vm_memory_working_set_bytes',
    help: "Working set of the VM's cgroup in bytes (usage minus inactive file pages).",
    labelNames,
    registers,
  });
  const uptime = new Gauge({ name: 'vkvm_vm_uptime_seconds', help: "Seconds since the VM's launcher started.", labelNames, registers });
  const scrapeError = new Gauge({
    name: 'vkvm_vm_usage_scrape_error',
    help: '1 if reading VM usage failed for this scrape, 0 otherwise.',
    registers,
  });
  for (const vm of vms) {
    const labels = { namespace: vm.namespace, pod: vm.pod, uid: vm.podUID };
    cpu.inc(labels, vm.cpuUsageCoreNanoSeconds / 1e9);
    memory.set(labels, vm.memoryWorkingSetBytes);
    uptime.set(labels, Math.max(0, (vm.time.getTime() - vm.startTime.getTime()) / 1000));
  }
  scrapeError.set(failed ? 1 : 0);
  return registry;
}

/** The kubelet's volume gauges for one scrape, so a volume gone leaves no series behind. */
function volumeRegistry(volumes: readonly VolumeStats[]): Registry {
  const registry = new Registry();
  const gauges = new Map(
    VOLUME_GAUGES.map(([name, , help]) => [
      name,
      new Gauge({ name, help, labelNames: ['namespace', 'persistentvolumeclaim'] as const, registers: [registry] }),
    ]),
  );
  for (const s of volumeSamples(volumes)) gauges.get(s.metric)!.set(s.labels, s.value);
  return registry;
}

export async function statsRoutes(app: FastifyInstance, opts: StatsRoutesOptions): Promise<void> {
  const rates = new CpuRates(opts.minRateIntervalMs);

  app.get(
    '/stats/summary',
    {
      schema: {
        // As the kubelet: CPU and memory only leaves the volumes out.
        querystring: { type: 'object', properties: { only_cpu_and_memory: { type: 'boolean' } } },
        response: { 200: summarySchema },
      },
    },
    async (req) => {
      const [node, vms] = await Promise.all([opts.node.readUsage(), opts.listVmUsage()]);
      const cpuAndMemoryOnly = (req.query as { only_cpu_and_memory?: boolean }).only_cpu_and_memory === true;
      const volumesOf = opts.volumeStats && !cpuAndMemoryOnly ? (uid: string) => opts.volumeStats!.forPod(uid) : undefined;
      return buildSummary(
        { nodeName: opts.nodeName, nodeStartTime: opts.node.startTime, node, vms, ...(volumesOf ? { volumesOf } : {}) },
        rates,
      );
    },
  );

  // As the kubelet: a failed read is reported in resource_scrape_error with a
  // 200, keeping whatever could be read.
  app.get('/metrics/resource', async (req, reply) => {
    const [node, vms] = await Promise.allSettled([opts.node.readUsage(), opts.listVmUsage()]);
    for (const r of [node, vms])
      if (r.status === 'rejected') req.log.warn({ err: r.reason }, 'reading resource usage for /metrics/resource failed');
    const text = formatResourceMetrics({
      ...(node.status === 'fulfilled' ? { node: node.value } : {}),
      vms: vms.status === 'fulfilled' ? vms.value : [],
      failed: node.status === 'rejected' || vms.status === 'rejected',
    });
    return reply.type(PROMETHEUS_TEXT).send(text);
  });

  app.get('/metrics', async (req, reply) => {
    let vms: VmCpuMemory[] = [];
    let failed = false;
    try {
      vms = await opts.listVmUsage();
    } catch (err) {
      req.log.warn({ err }, 'reading VM usage for /metrics failed');
      failed = true;
    }
    const merged = Registry.merge([opts.registry, vmRegistry(vms, failed), volumeRegistry(opts.volumeStats?.all() ?? [])]);
    return reply.type(merged.contentType).send(await merged.metrics());
  });
}

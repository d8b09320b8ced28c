import t, { type Test } from 'tap';
import { pino } from 'pino';
import { createAgentMetrics } from '../../metrics.js';
import type { NodeUsage } from '../../node/usage.js';
import type { AuthBackend, UserInfo } from '../auth.js';
import { buildKubeletApi } from '../server.js';
import type { VmAccess, VmCpuMemory } from '../vm-access.js';
import { noVmis } from '../../../test/helpers/vm-access.js';
import type { VolumeStats } from '../../csi-node/volume-stats.js';

const GiB = 1024 ** 3;
const t0 = new Date('2026-03-01T12:00:00Z');
const at = (s: number) => new Date(t0.getTime() + s * 1000);
const AUTH = { authorization: 'Bearer tok' };

function nodeSample(s: number, cpuSeconds: number): NodeUsage {
  return {
    time: at(s),
    cpuUsageCoreNanoSeconds: cpuSeconds * 1e9,
    memoryUsageBytes: 6 * GiB,
    memoryWorkingSetBytes: 4 * GiB,
    memoryRSSBytes: 2 * GiB,
    memoryAvailableBytes: 12 * GiB,
  };
}

function vmSample(s: number, cpuSeconds: number): VmCpuMemory {
  return {
    namespace: 'ns1',
    pod: 'vm-a',
    podUID: 'uid-a',
    container: 'compute',
    startTime: at(-60),
    time: at(s),
    cpuUsageCoreNanoSeconds: cpuSeconds * 1e9,
    memoryUsageBytes: 900 * 1024 ** 2,
    memoryWorkingSetBytes: 800 * 1024 ** 2,
    memoryRSSBytes: 700 * 1024 ** 2,
    memoryLimitBytes: 1 * GiB,
  };
}

/** Allows `ops` everything; `dev` only nodes/proxy. */
const backend: AuthBackend = {
  async reviewToken(token) {
    const users: Record<string, UserInfo> = { tok: { username: 'ops', groups: [] }, devtok: { username: 'dev', groups: [] } };
    return users[token] ?? null;
  },
  async authorize(user, attrs) {
    return user.username === 'ops' || attrs.subresource === 'proxy' ? { allowed: true } : { allowed: false, reason: 'no RBAC rule' };
  },
};

/** The kubelet API with a fake host whose next readings the test sets. */
async function build(t: Test) {
  const state = {
    node: nodeSample(0, 100),
    vms: [vmSample(0, 10)] as VmCpuMemory[],
    vmError: undefined as Error | undefined,
    volumes: new Map<string, VolumeStats[]>(),
  };
  const vms: VmAccess = {
    ...noVmis,
    attachConsole: () => Promise.reject(new Error('not in this test')),
    guestExec: () => Promise.reject(new Error('not in this test')),
    consoleLogPath: () => Promise.reject(new Error('not in this test')),
    podPorts: () => Promise.reject(new Error('not in this test')),
    vncDisplay: () => Promise.reject(new Error('not in this test')),
    listVmUsage: async () => {
      if (state.vmError) throw state.vmError;
      return state.vms;
    },
  };
  const metrics = createAgentMetrics();
  const app = await buildKubeletApi({
    nodeName: 'n1',
    backend,
    listPods: () => [],
    log: pino({ level: 'silent' }),
    vms,
    nodeStats: { startTime: new Date('2026-02-01T00:00:00Z'), readUsage: async () => state.node },
    metrics,
    volumeStats: { forPod: (uid) => state.volumes.get(uid) ?? [], all: () => [...state.volumes.values()].flat() },
  });
  t.teardown(() => app.close());
  return { app, state, metrics };
}

interface Series {
  name: string;
  labels: Record<string, string>;
  value: number;
  timestampMs?: number;
}

/** Parses Prometheus text format 0.0.4 back into series, and HELP/TYPE per family. */
function parseProm(text: string) {
  const series: Series[] = [];
  const types: Record<string, string> = {};
  const help: Record<string, string> = {};
  for (const line of text.split('\n')) {
    if (!line) continue;
    const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (meta) {
      (meta[1] === 'TYPE' ? types : help)[meta[2]!] = meta[3]!;
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: (\d+))?$/.exec(line);
    if (!m) throw new Error(`unparsable line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
    series.push({ name: m[1]!, labels, value: Number(m[3]), ...(m[4] ? { timestampMs: Number(m[4]) } : {}) });
  }
  return { series, types, help };
}

t.test('summary has the kubelet shape: node and one pod whose one container is the VM', async (t) => {
  const { app } = await build(t);
  const res = await app.inject({ url: '/stats/summary?only_cpu_and_memory=true', headers: AUTH });
  const cpu = { time: '2026-03-01T12:00:00Z', usageCoreNanoSeconds: 10e9 };
  const memory = {
    time: '2026-03-01T12:00:00Z',
    availableBytes: 224 * 1024 ** 2,
    usageBytes: 900 * 1024 ** 2,
    workingSetBytes: 800 * 1024 ** 2,
    rssBytes: 700 * 1024 ** 2,
  };
  t.same(
    { status: res.statusCode, body: res.json() },
    {
      status: 200,
      body: {
        node: {
          nodeName: 'n1',
          startTime: '2026-02-01T00:00:00Z',
          cpu: { time: '2026-03-01T12:00:00Z', usageCoreNanoSeconds: 100e9 },
          memory: {
            time: '2026-03-01T12:00:00Z',
            availableBytes: 12 * GiB,
            usageBytes: 6 * GiB,
            workingSetBytes: 4 * GiB,
            rssBytes: 2 * GiB,
          },
        },
        pods: [
          {
            podRef: { name: 'vm-a', namespace: 'ns1', uid: 'uid-a' },
            startTime: '2026-03-01T11:59:00Z',
            containers: [{ name: 'compute', startTime: '2026-03-01T11:59:00Z', cpu, memory }],
            cpu,
            memory,
          },
        ],
      },
    },
    'first sample: cumulative CPU and memory, no usageNanoCores yet; available = limit − working set',
  );
});

t.test('usageNanoCores is the CPU rate between two successive samples, per pod and for the node', async (t) => {
  const { app, state } = await build(t);
  await app.inject({ url: '/stats/summary', headers: AUTH });
  // 10 s later: the VM used 5 more core-seconds (0.5 cores), the node 40 (4 cores).
  state.node = nodeSample(10, 140);
  state.vms = [vmSample(10, 15)];
  const second = (await app.inject({ url: '/stats/summary', headers: AUTH })).json();
  // A sample 100 ms later reuses the last rate instead of dividing a tiny delta.
  state.node = nodeSample(10.1, 140.0001);
  state.vms = [vmSample(10.1, 15.2)];
  const soon = (await app.inject({ url: '/stats/summary', headers: AUTH })).json();
  // The VM restarted: its counter went back, so there is no rate until the next sample.
  state.node = nodeSample(20, 150);
  state.vms = [vmSample(20, 1)];
  const restarted = (await app.inject({ url: '/stats/summary', headers: AUTH })).json();
  const rates = (s: {
    node: { cpu: { usageNanoCores?: number } };
    pods: Array<{ cpu: { usageNanoCores?: number }; containers: Array<{ cpu: { usageNanoCores?: number } }> }>;
  }) => ({
    node: s.node.cpu.usageNanoCores,
    pod: s.pods[0]?.cpu.usageNanoCores,
    container: s.pods[0]?.containers[0]?.cpu.usageNanoCores,
  });
  t.same(
    [rates(second), rates(soon), rates(restarted)],
    [
      { node: 4e9, pod: 5e8, container: 5e8 },
      { node: 4e9, pod: 5e8, container: 5e8 },
      { node: 1e9, pod: undefined, container: undefined },
    ],
  );
});

t.test('/metrics/resource has the names, labels and timestamps metrics-server reads', async (t) => {
  const { app } = await build(t);
  const res = await app.inject({ url: '/metrics/resource', headers: AUTH });
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  const { series, types } = parseProm(res.body);
  const ts = t0.getTime();
  const container = { container: 'compute', namespace: 'ns1', pod: 'vm-a' };
  const pod = { namespace: 'ns1', pod: 'vm-a' };
  t.same(
    series,
    [
      { name: 'container_cpu_usage_seconds_total', labels: container, value: 10, timestampMs: ts },
      { name: 'container_memory_working_set_bytes', labels: container, value: 800 * 1024 ** 2, timestampMs: ts },
      { name: 'container_start_time_seconds', labels: container, value: ts / 1000 - 60 },
      { name: 'node_cpu_usage_seconds_total', labels: {}, value: 100, timestampMs: ts },
      { name: 'node_memory_working_set_bytes', labels: {}, value: 4 * GiB, timestampMs: ts },
      { name: 'pod_cpu_usage_seconds_total', labels: pod, value: 10, timestampMs: ts },
      { name: 'pod_memory_working_set_bytes', labels: pod, value: 800 * 1024 ** 2, timestampMs: ts },
      { name: 'resource_scrape_error', labels: {}, value: 0 },
      { name: 'scrape_error', labels: {}, value: 0 },
    ],
    'every series the kubelet exposes for CPU and memory',
  );
  t.match(types, {
    container_cpu_usage_seconds_total: 'counter',
    node_cpu_usage_seconds_total: 'counter',
    pod_cpu_usage_seconds_total: 'counter',
    container_memory_working_set_bytes: 'gauge',
    resource_scrape_error: 'gauge',
  });
});

t.test('/metrics/resource reports a failed VM read in resource_scrape_error and keeps the node', async (t) => {
  const { app, state } = await build(t);
  state.vmError = new Error('launcher registry unavailable');
  const res = await app.inject({ url: '/metrics/resource', headers: AUTH });
  const { series } = parseProm(res.body);
  t.same(
    {
      status: res.statusCode,
      names: series.map((s) => s.name),
      errors: series.filter((s) => s.name.endsWith('scrape_error')).map((s) => s.value),
    },
    {
      status: 200,
      names: ['node_cpu_usage_seconds_total', 'node_memory_working_set_bytes', 'resource_scrape_error', 'scrape_error'],
      errors: [1, 1],
    },
  );
});

t.test('/metrics serves the agent registry and per-VM usage', async (t) => {
  const { app, metrics, state } = await build(t);
  metrics.podSyncs.inc({ result: 'success' });
  metrics.vmsRunning.set(1);
  state.vms = [vmSample(30, 12.5)];
  const res = await app.inject({ url: '/metrics', headers: AUTH });
  const { series, types } = parseProm(res.body);
  const vm = { namespace: 'ns1', pod: 'vm-a', uid: 'uid-a' };
  const pick = (name: string) => series.filter((s) => s.name === name).map(({ labels, value }) => ({ labels, value }));
  t.same(
    {
      cpu: pick('vkvm_vm_cpu_seconds_total'),
      memory: pick('vkvm_vm_memory_working_set_bytes'),
      uptime: pick('vkvm_vm_uptime_seconds'),
      scrapeError: pick('vkvm_vm_usage_scrape_error'),
      syncs: pick('vkvm_pod_syncs_total'),
      running: pick('vkvm_vms_running'),
    },
    {
      cpu: [{ labels: vm, value: 12.5 }],
      memory: [{ labels: vm, value: 800 * 1024 ** 2 }],
      uptime: [{ labels: vm, value: 90 }],
      scrapeError: [{ labels: {}, value: 0 }],
      syncs: [{ labels: { result: 'success' }, value: 1 }],
      running: [{ labels: {}, value: 1 }],
    },
  );
  t.match(
    types,
    {
      vkvm_vm_cpu_seconds_total: 'counter',
      vkvm_pod_sync_duration_seconds: 'histogram',
      vkvm_launcher_starts_total: 'counter',
      process_cpu_seconds_total: 'counter',
      nodejs_heap_size_total_bytes: 'gauge',
    },
    'agent metrics and default process metrics are declared',
  );

  // A VM that is gone leaves no series behind.
  state.vms = [];
  const after = parseProm((await app.inject({ url: '/metrics', headers: AUTH })).body).series;
  t.same(
    after.filter((s) => s.name.startsWith('vkvm_vm_') && s.name !== 'vkvm_vm_usage_scrape_error'),
    [],
    'no series for a stopped VM',
  );
});

t.test('a user without nodes/stats or nodes/metrics gets 403 naming the subresource', async (t) => {
  const { app } = await build(t);
  const get = (url: string) => app.inject({ url, headers: { authorization: 'Bearer devtok' } });
  const [summary, resource, metrics] = await Promise.all([get('/stats/summary'), get('/metrics/resource'), get('/metrics')]);
  t.match(
    [summary, resource, metrics].map((r) => ({ code: r.statusCode, body: r.body })),
    [
      { code: 403, body: /user=dev, verb=get, resource=nodes, subresource=stats/ },
      { code: 403, body: /subresource=metrics/ },
      { code: 403, body: /subresource=metrics/ },
    ],
  );
  t.equal((await app.inject({ url: '/stats/summary' })).statusCode, 401, 'anonymous');
});

t.test("a pod's published volumes are in its summary entry and in the kubelet's volume gauges, by claim", async (t) => {
  const { app, state } = await build(t);
  const data: VolumeStats = {
    time: '2026-03-01T11:59:50Z',
    name: 'datadisk',
    pvcRef: { name: 'data', namespace: 'ns1' },
    capacityBytes: 1000,
    usedBytes: 300,
    availableBytes: 600,
    inodes: 64,
    inodesUsed: 11,
    inodesFree: 53,
  };
  const raw: VolumeStats = {
    time: '2026-03-01T11:59:50Z',
    name: 'rawdisk',
    pvcRef: { name: 'raw', namespace: 'ns1' },
    capacityBytes: 4096,
    usedBytes: 0,
    availableBytes: 0,
  };
  state.volumes.set('uid-a', [data, raw]);
  const summary = (await app.inject({ url: '/stats/summary', headers: AUTH })).json() as { pods: { volume?: VolumeStats[] }[] };
  t.same(summary.pods[0]!.volume, [data, raw], 'every field the kubelet reports, as cached');
  const cpuOnly = (await app.inject({ url: '/stats/summary?only_cpu_and_memory=true', headers: AUTH })).json() as { pods: object[] };
  t.notOk('volume' in cpuOnly.pods[0]!, 'only_cpu_and_memory leaves the volumes out, as the kubelet does');
  const { series, types } = parseProm((await app.inject({ url: '/metrics', headers: AUTH })).body);
  const gauges = series
    .filter((s) => s.name.startsWith('kubelet_volume_stats_'))
    .map((s) => `${s.name}{${s.labels.namespace}/${s.labels.persistentvolumeclaim}} ${s.value}`);
  t.same(
    gauges.sort(),
    [
      'kubelet_volume_stats_available_bytes{ns1/data} 600',
      'kubelet_volume_stats_available_bytes{ns1/raw} 0',
      'kubelet_volume_stats_capacity_bytes{ns1/data} 1000',
      'kubelet_volume_stats_capacity_bytes{ns1/raw} 4096',
      'kubelet_volume_stats_inodes_free{ns1/data} 53',
      'kubelet_volume_stats_inodes_used{ns1/data} 11',
      'kubelet_volume_stats_inodes{ns1/data} 64',
      'kubelet_volume_stats_used_bytes{ns1/data} 300',
      'kubelet_volume_stats_used_bytes{ns1/raw} 0',
    ],
    'one series per claim and figure reported',
  );
  t.equal(types.kubelet_volume_stats_capacity_bytes, 'gauge');
  state.volumes.clear();
  const after = (await app.inject({ url: '/stats/summary', headers: AUTH })).json() as { pods: object[] };
  t.notOk('volume' in after.pods[0]!, 'a pod without volumes has no volume entry, as the kubelet omits it');
  t.same(
    parseProm((await app.inject({ url: '/metrics', headers: AUTH })).body).series.filter((s) => s.name.startsWith('kubelet_volume_stats_')),
    [],
    'a volume gone leaves no series',
  );
});

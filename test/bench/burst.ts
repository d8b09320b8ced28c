// The burst: 20 pods created at once on one node, and where the host's CPU
// went from the first create until every VM ran, per VM start: vkvm's own
// (the launchers with their libvirtd and helpers, the agent and the host
// commands it ran) beside QEMU's. The agent's own account of the same starts
// (vkvm_cpu_ms_per_vm_start, read from its /metrics through kube-apiserver,
// and per VM from its "VM started" log lines) is reported beside the bench's.
// The boot storm is the same with `--vms N` pods (default 20; #29 asks for
// 100 on one node), timed on to every guest Ready.
import os from 'node:os';
import { startAgentProfile } from './agent-profile.js';
import type { BenchContext, Benchmark } from './bench.js';
import { startBenchNode, type BenchNode } from './cluster-node.js';
import { cpuSnapshot, cpuUsed, VKVM_PARTS, type CpuPart } from './cpu-split.js';
import { PodWatch } from './pod-watch.js';
import { createPods, NAMESPACE, NODE, parseLogLines, podNames, removePod, untilAll, vmPod } from './pods.js';
import { mean, percentile } from './stats.js';

const BURST_PODS = 20;

/** One storm of pods: how many, the figures' prefix, and whether to wait on until every guest is Ready. */
interface Storm {
  pods: number;
  prefix: 'burst' | 'boot_storm';
  untilReady: boolean;
}

/**
 * The histogram's sum and count as the agent serves them on its kubelet port
 * (nodes/proxy/metrics); undefined from an agent that predates the metric.
 */
async function agentStartCpu(node: BenchNode): Promise<{ sumMs: number; count: number } | undefined> {
  const r = await node.kubectl(['get', '--raw', `/api/v1/nodes/${node.nodeName}/proxy/metrics`], { timeoutMs: 30_000 });
  if (r.code !== 0) throw new Error(`reading the agent's metrics failed: ${r.stderr.trim()}`);
  const value = (name: string) => /^\S+ (\S+)$/m.exec(r.stdout.split('\n').find((l) => l.startsWith(`${name} `)) ?? '')?.[1];
  const sum = value('vkvm_cpu_ms_per_vm_start_sum');
  const count = value('vkvm_cpu_ms_per_vm_start_count');
  return sum === undefined || count === undefined ? undefined : { sumMs: Number(sum), count: Number(count) };
}

/** snake_case names of the parts, for figures. */
const PART_NAMES: Record<CpuPart, string> = {
  qemuS: 'qemu',
  launcherNodeS: 'launcher_node',
  libvirtdS: 'libvirtd',
  virshS: 'virsh',
  helpersS: 'helpers',
  agentS: 'agent',
  agentChildrenS: 'agent_host_commands',
  controlPlaneS: 'control_plane',
};

async function benchStorm(ctx: BenchContext, storm: Storm): Promise<void> {
  const { pods, prefix } = storm;
  const node = await startBenchNode(ctx, { nodeName: NODE, namespace: NAMESPACE });
  const watch = await PodWatch.start(node.clients, node.namespace);
  ctx.defer('pod watch', () => watch.stop());

  // The first start pays for first use (scheduler, image lookup, page cache); it is not counted.
  await createPods(node, [vmPod('warmup')]);
  await untilAll(ctx, watch, ['warmup'], 'running');
  await removePod(ctx, node, watch, 'warmup');

  const names = podNames(prefix.replace('_', '-'), pods);
  const metricBefore = await agentStartCpu(node);
  const before = await cpuSnapshot(node, []);
  const stopProfile = await startAgentProfile(node.agentInspector);
  const createdAt = await createPods(
    node,
    names.map((n) => vmPod(n)),
  );
  await untilAll(ctx, watch, names, 'running');
  const uids = names.map((n) => watch.pod(n)?.metadata?.uid ?? '');
  const used = cpuUsed(before, await cpuSnapshot(node, uids));
  const profile = await stopProfile();
  if (profile) ctx.log(`the agent's CPU profile from the first create until all ran: ${profile}`);
  const metricAfter = await agentStartCpu(node);

  const firstCreate = Math.min(...createdAt.values());
  const toRunning = names.map((n) => watch.of(n).running! - createdAt.get(n)!);
  ctx.emit(`${prefix}_pod_create_to_running_ms_p50`, percentile(toRunning, 50), 'ms');
  ctx.emit(`${prefix}_pod_create_to_running_ms_p95`, percentile(toRunning, 95), 'ms');
  ctx.emit(`${prefix}_pod_create_to_all_running_ms`, Math.max(...names.map((n) => watch.of(n).running!)) - firstCreate, 'ms');

  const perStartMs = (s: number): number => (1000 * s) / pods;
  const vkvmS = VKVM_PARTS.reduce((sum, part) => sum + used[part], 0);
  const otherS = used.hostBusyS - vkvmS - used.qemuS - used.controlPlaneS;
  ctx.log(
    `CPU from the first create until all ${pods} ran (${used.windowS.toFixed(1)} s × ${os.cpus().length} cores, busy ${used.hostBusyS.toFixed(1)} s): ` +
      (Object.keys(PART_NAMES) as CpuPart[]).map((p) => `${PART_NAMES[p]} ${used[p].toFixed(2)} s`).join(', ') +
      `, the rest of the host ${otherS.toFixed(2)} s`,
  );
  ctx.emit(`${prefix}_vkvm_cpu_ms_per_vm_start`, perStartMs(vkvmS), 'ms');
  ctx.emit(`${prefix}_qemu_cpu_ms_per_vm_start`, perStartMs(used.qemuS), 'ms');
  ctx.emit(`${prefix}_qemu_cpu_share_pct`, (100 * used.qemuS) / (used.qemuS + vkvmS), '%');
  for (const part of Object.keys(PART_NAMES) as CpuPart[]) {
    if (part !== 'qemuS') ctx.emit(`${prefix}_cpu_ms_per_vm_start_${PART_NAMES[part]}`, perStartMs(used[part]), 'ms');
  }
  ctx.emit(`${prefix}_cpu_ms_per_vm_start_rest_of_host`, perStartMs(otherS), 'ms');
  ctx.emit(`${prefix}_host_cpu_busy_pct`, (100 * used.hostBusyS) / (used.windowS * os.cpus().length), '%');
  if (storm.untilReady) {
    // Ready is the guest's first console byte (provider/pods/observe.ts): every guest has booted that far.
    await untilAll(ctx, watch, names, 'ready');
    const toReady = names.map((n) => watch.of(n).ready! - createdAt.get(n)!);
    ctx.emit(`${prefix}_pod_create_to_ready_ms_p50`, percentile(toReady, 50), 'ms');
    ctx.emit(`${prefix}_pod_create_to_ready_ms_p95`, percentile(toReady, 95), 'ms');
    ctx.emit(`${prefix}_pod_create_to_all_ready_ms`, Math.max(...names.map((n) => watch.of(n).ready!)) - firstCreate, 'ms');
  }

  // The agent's own account: what its metric says these starts cost, and per VM from its log.
  if (!metricBefore || !metricAfter) return ctx.log('the agent has no vkvm_cpu_ms_per_vm_start');
  const counted = metricAfter.count - metricBefore.count;
  if (counted !== pods) throw new Error(`vkvm_cpu_ms_per_vm_start counted ${counted} starts, not ${pods}`);
  ctx.emit(`${prefix}_agent_metric_cpu_ms_per_vm_start_mean`, (metricAfter.sumMs - metricBefore.sumMs) / counted, 'ms');
  const logged = parseLogLines(node.agentOutput).flatMap((l) =>
    l.msg === 'VM started' && typeof l.cpuMs === 'number' && names.some((n) => l.pod === `${NAMESPACE}/${n}`) ? [l.cpuMs] : [],
  );
  if (logged.length > 0) {
    ctx.emit(`${prefix}_agent_metric_cpu_ms_per_vm_start_p50`, percentile(logged, 50), 'ms');
    ctx.emit(`${prefix}_agent_metric_cpu_ms_per_vm_start_p95`, percentile(logged, 95), 'ms');
    ctx.log(`the agent's per-start figures: mean ${mean(logged).toFixed(0)} ms over ${logged.length} starts`);
  }
}

export const BURST_BENCHMARKS: Benchmark[] = [
  {
    name: 'burst.start',
    description: `${BURST_PODS} pods created at once → all Running; vkvm's own CPU per VM start (launchers, libvirtd, agent, its host commands) beside QEMU's`,
    run: (ctx) => benchStorm(ctx, { pods: BURST_PODS, prefix: 'burst', untilReady: false }),
  },
  {
    name: 'boot-storm.start',
    description: `--vms N pods (default ${BURST_PODS}) created at once on one node → all Running, all Ready; vkvm's own CPU per VM start`,
    heavy: true,
    run: (ctx) => benchStorm(ctx, { pods: ctx.vms ?? BURST_PODS, prefix: 'boot_storm', untilReady: true }),
  },
];

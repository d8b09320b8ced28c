// Pod benchmarks through the real control plane: how long a pod created
// through kube-apiserver takes to become a Running VM (and to reach the
// guest's first console output, which is what sets Ready), and how long a
// guest that powers off takes to show in the pod's status. Each benchmark
// runs its own control plane and node agent (cluster-node.ts). The figures
// come from one watch on the namespace's pods (pod-watch.ts); the split comes
// from the agent's log, the launchers' logs, the console logs and /proc, all
// on this host's clock (Unix ms).
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { V1Pod } from '@kubernetes/client-node';
import { GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import { until, type BenchContext, type Benchmark } from './bench.js';
import { startBenchNode, type BenchNode } from './cluster-node.js';
import { PodWatch, type PodMarks } from './pod-watch.js';
import { cpuSnapshot, cpuUsed, LAUNCHER_PARTS } from './cpu-split.js';
import { isRunning, qemuPidsOf } from './proc.js';
import { percentile } from './stats.js';

export const NODE = 'vkvm-bench-pods';
export const NAMESPACE = 'bench-pods';
/** Pods pods.start creates at once, after one warm-up pod. */
const START_PODS = 20;
/** Pods pods.poweroff powers off, one after another. */
const POWEROFF_PODS = 5;
/** 20 TCG guests booting at once on 2 cores take minutes. */
const BOOT_TIMEOUT_MS = 900_000;
const GUEST_AGENT_TIMEOUT_MS = 300_000;
const POWEROFF_TIMEOUT_MS = 120_000;
/** How often the host is asked whether a powered-off guest's QEMU is gone: the resolution of that t0. */
const QEMU_EXIT_POLL_MS = 5;

/** A VM pod as the e2e tests write it: the test guest's containerDisk (in the node's store) on the vkvm node. */
export function vmPod(name: string, restartPolicy?: 'Never'): V1Pod {
  return {
    metadata: { name, namespace: NAMESPACE },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': NODE },
      tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
      ...(restartPolicy ? { restartPolicy } : {}),
      // 20 × 100m fill the node's 2 cores exactly; every VM still gets 1 vCPU, uncapped.
      containers: [{ name: 'vm', image: TEST_GUEST_IMAGE, resources: { requests: { cpu: '100m' }, limits: { memory: '192Mi' } } }],
    },
  };
}

const round = (ms: number): number => Math.round(ms);
export const podNames = (prefix: string, n: number): string[] =>
  Array.from({ length: n }, (_, i) => `${prefix}-${String(i + 1).padStart(2, '0')}`);

/** Creates the pods concurrently; returns Date.now() taken just before each create call, by name. */
export async function createPods(node: BenchNode, pods: V1Pod[]): Promise<Map<string, number>> {
  const createdAt = new Map<string, number>();
  await Promise.all(
    pods.map((body) => {
      createdAt.set(body.metadata!.name!, Date.now());
      return node.clients.core.createNamespacedPod({ namespace: node.namespace, body });
    }),
  );
  return createdAt;
}

/** A short summary of the pods' last statuses, for timeout messages. */
export function describePods(watch: PodWatch, names: string[]): string {
  return names
    .map((n) => {
      const p = watch.pod(n);
      const cs = p?.status?.containerStatuses?.[0]?.state;
      const detail = cs?.waiting?.reason ?? (cs?.terminated ? `terminated:${cs.terminated.reason}` : cs?.running ? 'running' : '');
      return `${n}=${p?.status?.phase ?? 'unseen'}${detail ? `/${detail}` : ''}${p?.spec?.nodeName ? '' : '(unscheduled)'}`;
    })
    .join(' ');
}

/** Waits until every pod reached `mark` (Running, Ready); fails at once when one of them fails. */
export async function untilAll(ctx: BenchContext, watch: PodWatch, names: string[], mark: 'running' | 'ready'): Promise<void> {
  await watch.until(
    `${names.length} pod(s) ${mark}`,
    () => {
      const failed = names.find((n) => watch.of(n).failed !== undefined);
      if (failed) throw new Error(`pod ${failed} failed: ${JSON.stringify(watch.pod(failed)?.status)}`);
      return names.every((n) => watch.of(n)[mark] !== undefined);
    },
    { timeoutMs: BOOT_TIMEOUT_MS, signal: ctx.signal, describe: () => describePods(watch, names) },
  );
}

export type LogLine = Record<string, unknown> & { msg?: string; time?: number | string };

/** pino JSON lines; other lines are skipped. */
export function parseLogLines(lines: string[]): LogLine[] {
  const out: LogLine[] = [];
  for (const line of lines) {
    if (!line.startsWith('{')) continue;
    try {
      out.push(JSON.parse(line) as LogLine);
    } catch {
      // not pino's JSON
    }
  }
  return out;
}

/** Unix ms of a pino line: the agent logs ISO time, launchers epoch ms. */
function timeOf(l: LogLine): number | undefined {
  if (typeof l.time === 'number') return l.time;
  if (typeof l.time === 'string') return Date.parse(l.time);
  return undefined;
}

async function launcherLog(node: BenchNode, uid: string): Promise<LogLine[]> {
  const text = await readFile(join(node.agentStateDir, 'vms', uid, 'launcher.log'), 'utf8').catch(() => '');
  return parseLogLines(text.split('\n'));
}

/** Where one pod's time from create to Running and Ready went, in Unix ms; undefined where a log line was missing. */
interface StartTimeline {
  name: string;
  created: number;
  marks: PodMarks;
  /** Leasing the address and building the VM's network namespace (the agent's "VM network attached" ms). */
  networkAttachMs?: number;
  /** The agent began startVm: spawn the launcher, then SyncVm (its "VM started" time minus its ms). */
  agentStart?: number;
  /** The launcher's "launcher ready" line: socket bound, libvirtd up. */
  launcherReady?: number;
  libvirtdMs?: number;
  /** SyncVm returned to the agent (its "VM started" line). */
  syncVmDone?: number;
  /** The first line of the console log (its CRI timestamp and text), and the guest's boot marker. */
  firstConsole?: { at: number; text: string };
  bootMarker?: number;
}

/** The first record of a VM's console log, and when the boot marker was written (CRI records: "<ISO time> stdout F|P <text>"). */
export async function consoleMilestones(node: BenchNode, uid: string): Promise<Pick<StartTimeline, 'firstConsole' | 'bootMarker'>> {
  const text = await readFile(join(node.agentStateDir, 'vms', uid, 'console', 'console.log'), 'utf8').catch(() => '');
  const out: Pick<StartTimeline, 'firstConsole' | 'bootMarker'> = {};
  for (const line of text.split('\n')) {
    const m = /^(\S+) stdout [FP] (.*)$/.exec(line);
    if (!m) continue;
    const at = Date.parse(m[1]!);
    out.firstConsole ??= { at, text: m[2]!.slice(0, 60) };
    if (m[2]!.includes(GUEST_BOOT_MARKER)) {
      out.bootMarker = at;
      break;
    }
  }
  return out;
}

async function startTimeline(node: BenchNode, watch: PodWatch, name: string, created: number): Promise<StartTimeline> {
  const pod = watch.pod(name);
  const uid = pod?.metadata?.uid ?? '';
  const key = `${node.namespace}/${name}`;
  const tl: StartTimeline = { name, created, marks: watch.of(name) };
  const started = parseLogLines(node.agentOutput).find((l) => l.msg === 'VM started' && l.pod === key);
  const attached = parseLogLines(node.agentOutput).find((l) => l.msg === 'VM network attached' && l.pod === key);
  if (typeof attached?.ms === 'number') tl.networkAttachMs = attached.ms;
  const startedAt = started && timeOf(started);
  if (startedAt !== undefined && typeof started?.ms === 'number') {
    tl.syncVmDone = startedAt;
    tl.agentStart = startedAt - started.ms;
  }
  const ready = (await launcherLog(node, uid)).find((l) => l.msg === 'launcher ready');
  if (ready) {
    const at = timeOf(ready);
    if (at !== undefined) tl.launcherReady = at;
    if (typeof ready.libvirtdMs === 'number') tl.libvirtdMs = ready.libvirtdMs;
  }
  return { ...tl, ...(await consoleMilestones(node, uid)) };
}

/** The steps of a start, in order: [figure name, from, to]. */
const START_STEPS: [string, (t: StartTimeline) => number | undefined, (t: StartTimeline) => number | undefined][] = [
  ['pod_create_to_scheduled_ms', (t) => t.created, (t) => t.marks.scheduled],
  ['pod_scheduled_to_agent_start_ms', (t) => t.marks.scheduled, (t) => t.agentStart],
  ['pod_agent_start_to_launcher_ready_ms', (t) => t.agentStart, (t) => t.launcherReady],
  ['pod_launcher_ready_to_syncvm_done_ms', (t) => t.launcherReady, (t) => t.syncVmDone],
  ['pod_syncvm_done_to_running_ms', (t) => t.syncVmDone, (t) => t.marks.running],
  ['pod_running_to_ready_ms', (t) => t.marks.running, (t) => t.marks.ready],
];

function describeTimeline(t: StartTimeline): string {
  const rel = (at: number | undefined): string => (at === undefined ? '?' : `+${round(at - t.created)}`);
  return (
    `${t.name}: scheduled ${rel(t.marks.scheduled)}, agent status ${rel(t.marks.agentStatus)}, agent start ${rel(t.agentStart)}, ` +
    `launcher ready ${rel(t.launcherReady)} (libvirtd ${t.libvirtdMs ?? '?'} ms), SyncVm done ${rel(t.syncVmDone)}, ` +
    `Running ${rel(t.marks.running)}, Ready ${rel(t.marks.ready)} ms; ` +
    `console: first line ${rel(t.firstConsole?.at)} ms ${JSON.stringify(t.firstConsole?.text ?? '')}, boot marker ${rel(t.bootMarker)} ms`
  );
}

/** Force-deletes one pod and waits until the agent removed its VM (directory gone, no QEMU). */
export async function removePod(ctx: BenchContext, node: BenchNode, watch: PodWatch, name: string): Promise<void> {
  const uid = watch.pod(name)?.metadata?.uid ?? '';
  await node.clients.core.deleteNamespacedPod({ name, namespace: node.namespace, gracePeriodSeconds: 0 });
  const dir = join(node.agentStateDir, 'vms', uid);
  await until(`the VM of ${name} is removed`, () => qemuPidsOf(uid).length === 0 && !existsSync(dir), 60_000, ctx.signal);
}

async function benchStart(ctx: BenchContext): Promise<void> {
  const node = await startBenchNode(ctx, { nodeName: NODE, namespace: NAMESPACE });
  const watch = await PodWatch.start(node.clients, node.namespace);
  ctx.defer('pod watch', () => watch.stop());

  // Warm-up: the first pod pays for first use (scheduler caches, agent's image lookup, page cache).
  const warm = await createPods(node, [vmPod('warmup')]);
  await untilAll(ctx, watch, ['warmup'], 'ready');
  const w = await startTimeline(node, watch, 'warmup', warm.get('warmup')!);
  ctx.log(`warm-up ${describeTimeline(w)}`);
  ctx.emit('pod_create_to_running_ms_warmup', w.marks.running! - w.created, 'ms');
  ctx.emit('pod_create_to_ready_ms_warmup', w.marks.ready! - w.created, 'ms');
  await removePod(ctx, node, watch, 'warmup');

  const names = podNames('vm', START_PODS);
  ctx.log(`creating ${START_PODS} pods at once`);
  const cpuBefore = await cpuSnapshot(node, []);
  const createdAt = await createPods(
    node,
    names.map((n) => vmPod(n)),
  );
  const firstCreate = Math.min(...createdAt.values());
  await untilAll(ctx, watch, names, 'running');
  // Where the host's CPU went while the pods were starting; the VMs and launchers began in this window.
  const cpuAfter = await cpuSnapshot(
    node,
    names.map((n) => watch.pod(n)?.metadata?.uid ?? ''),
  );
  await untilAll(ctx, watch, names, 'ready');
  const timelines = await Promise.all(names.map((n) => startTimeline(node, watch, n, createdAt.get(n)!)));
  // Slowest last: the tail is where the time goes.
  for (const t of [...timelines].sort((a, b) => a.marks.running! - a.created - (b.marks.running! - b.created)))
    ctx.log(describeTimeline(t));

  const toRunning = timelines.map((t) => t.marks.running! - t.created);
  const toReady = timelines.map((t) => t.marks.ready! - t.created);
  ctx.emit('pod_create_to_running_ms_p50', percentile(toRunning, 50), 'ms');
  ctx.emit('pod_create_to_running_ms_p95', percentile(toRunning, 95), 'ms');
  // Ready is set on the guest's first console byte: this is create → first console output.
  ctx.emit('pod_create_to_console_ms_p50', percentile(toReady, 50), 'ms');
  ctx.emit('pod_create_to_ready_ms_p95', percentile(toReady, 95), 'ms');
  // The guest's own "booted" line: with `quiet`, the first console byte is either an early kernel warning or this.
  const toBootMarker = timelines.flatMap((t) => (t.bootMarker === undefined ? [] : [t.bootMarker - t.created]));
  if (toBootMarker.length > 0) {
    ctx.emit('pod_create_to_boot_marker_ms_p50', percentile(toBootMarker, 50), 'ms');
    ctx.emit('pod_create_to_boot_marker_ms_p95', percentile(toBootMarker, 95), 'ms');
  }
  ctx.emit('pod_create_to_all_running_ms', Math.max(...timelines.map((t) => t.marks.running!)) - firstCreate, 'ms');
  const used = cpuUsed(cpuBefore, cpuAfter);
  const launchersS = LAUNCHER_PARTS.reduce((sum, part) => sum + used[part], 0);
  // As before the split had parts: the agent's host commands (ip, nft, …) count as the rest of the host.
  const otherS = used.hostBusyS - used.qemuS - launchersS - used.agentS - used.controlPlaneS;
  ctx.log(
    `CPU from the first create to all Running (${used.windowS.toFixed(1)} s × ${os.cpus().length} cores): busy ${used.hostBusyS.toFixed(1)} s; ` +
      `QEMU ${used.qemuS.toFixed(1)} s, launchers+libvirtd ${launchersS.toFixed(1)} s, agent ${used.agentS.toFixed(1)} s ` +
      `(its host commands ${used.agentChildrenS.toFixed(1)} s more), control plane ${used.controlPlaneS.toFixed(1)} s, other ${otherS.toFixed(1)} s`,
  );
  ctx.emit('pod_start_host_cpu_busy_pct', (100 * used.hostBusyS) / (used.windowS * os.cpus().length), '%');
  ctx.emit('pod_start_cpu_qemu_s', used.qemuS, 's');
  ctx.emit('pod_start_cpu_launchers_s', launchersS, 's');
  ctx.emit('pod_start_cpu_agent_s', used.agentS, 's');
  ctx.emit('pod_start_cpu_control_plane_s', used.controlPlaneS, 's');
  ctx.emit('pod_start_cpu_other_s', otherS, 's');
  for (const [name, from, to] of START_STEPS) {
    const samples = timelines.flatMap((t) => {
      const a = from(t);
      const b = to(t);
      return a === undefined || b === undefined ? [] : [b - a];
    });
    if (samples.length < timelines.length) ctx.log(`${name}: log lines missing for ${timelines.length - samples.length} pod(s)`);
    if (samples.length === 0) continue;
    ctx.emit(`${name}_p50`, percentile(samples, 50), 'ms');
    ctx.emit(`${name}_p95`, percentile(samples, 95), 'ms');
  }
  const attaches = timelines.flatMap((t) => (t.networkAttachMs === undefined ? [] : [t.networkAttachMs]));
  if (attaches.length > 0) {
    ctx.emit('pod_network_attach_ms_p50', percentile(attaches, 50), 'ms');
    ctx.emit('pod_network_attach_ms_p95', percentile(attaches, 95), 'ms');
  }
  const libvirtds = timelines.flatMap((t) => (t.libvirtdMs === undefined ? [] : [t.libvirtdMs]));
  if (libvirtds.length > 0) {
    ctx.emit('pod_launcher_libvirtd_start_ms_p50', percentile(libvirtds, 50), 'ms');
    ctx.emit('pod_launcher_libvirtd_start_ms_p95', percentile(libvirtds, 95), 'ms');
  }
}

/** Resolves with Unix ms once the process is gone, polled every QEMU_EXIT_POLL_MS (a non-child has no exit notification). */
async function exitTime(pid: number, timeoutMs: number, signal: AbortSignal): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (isRunning(pid)) {
    if (Date.now() > deadline) throw new Error(`QEMU ${pid} still runs after ${timeoutMs} ms`);
    await sleep(QEMU_EXIT_POLL_MS, undefined, { signal });
  }
  return Date.now();
}

/** Retries `kubectl exec POD -- /bin/true` until the guest agent answers, for up to `timeoutMs`. */
export async function untilGuestAgentAnswers(
  ctx: BenchContext,
  node: BenchNode,
  name: string,
  timeoutMs = GUEST_AGENT_TIMEOUT_MS,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await node.kubectl(['exec', name, '--', '/bin/true'], { timeoutMs: 60_000 });
    if (r.code === 0) return;
    if (Date.now() > deadline) throw new Error(`the guest agent of ${name} did not answer in ${timeoutMs} ms: ${r.stderr.trim()}`);
    await sleep(1000, undefined, { signal: ctx.signal });
  }
}

interface PoweroffTimes {
  name: string;
  /** Just before `kubectl exec POD -- /bin/poweroff` was spawned. */
  exec: number;
  /** The VM's QEMU process was seen gone on the host. */
  qemuExit: number;
  /** The launcher's first "VM state" line with phase Succeeded. */
  launcherSucceeded?: number;
  /** The watch delivered phase Succeeded. */
  status: number;
}

export async function powerOff(ctx: BenchContext, node: BenchNode, watch: PodWatch, name: string): Promise<PoweroffTimes> {
  const uid = watch.pod(name)?.metadata?.uid ?? '';
  const [qemuPid, ...more] = qemuPidsOf(uid);
  if (qemuPid === undefined || more.length > 0)
    throw new Error(`expected one QEMU for ${name} (${uid}), found ${[qemuPid, ...more].join(',') || 'none'}`);
  const qemuGone = exitTime(qemuPid, POWEROFF_TIMEOUT_MS, ctx.signal);
  // Awaited below; until then a rejection (timeout, Ctrl-C) must not count as unhandled.
  qemuGone.catch(() => {});
  const exec = Date.now();
  // The guest agent's reply may not make it out before the guest is gone: only the outcome counts.
  const execDone = node.kubectl(['exec', name, '--', '/bin/poweroff'], { timeoutMs: 60_000 });
  await watch.until(
    `${name} Succeeded`,
    () => {
      if (watch.of(name).failed !== undefined) throw new Error(`pod ${name} failed: ${JSON.stringify(watch.pod(name)?.status)}`);
      return watch.of(name).succeeded !== undefined;
    },
    { timeoutMs: POWEROFF_TIMEOUT_MS, signal: ctx.signal, describe: () => describePods(watch, [name]) },
  );
  const qemuExit = await qemuGone;
  const r = await execDone;
  if (r.code !== 0)
    ctx.log(
      `${name}: kubectl exec poweroff exited ${r.code} (${r.stderr.trim().split('\n').pop() ?? ''}); the guest powered off regardless`,
    );
  const stopped = (await launcherLog(node, uid)).find((l) => l.msg === 'VM state' && l.phase === 'Succeeded');
  const launcherSucceeded = stopped && timeOf(stopped);
  return { name, exec, qemuExit, status: watch.of(name).succeeded!, ...(launcherSucceeded !== undefined ? { launcherSucceeded } : {}) };
}

async function benchPoweroff(ctx: BenchContext): Promise<void> {
  const node = await startBenchNode(ctx, { nodeName: NODE, namespace: NAMESPACE });
  const watch = await PodWatch.start(node.clients, node.namespace);
  ctx.defer('pod watch', () => watch.stop());

  const names = podNames('off', POWEROFF_PODS);
  await createPods(
    node,
    names.map((n) => vmPod(n, 'Never')),
  );
  await untilAll(ctx, watch, names, 'ready');
  for (const n of names) await untilGuestAgentAnswers(ctx, node, n);
  ctx.log(`${POWEROFF_PODS} pods Ready and their guest agents answer; powering them off one after another`);

  const runs: PoweroffTimes[] = [];
  for (const n of names) {
    const r = await powerOff(ctx, node, watch, n);
    runs.push(r);
    ctx.log(
      `${n}: exec issued → QEMU gone ${round(r.qemuExit - r.exec)} ms → launcher Succeeded ` +
        `${r.launcherSucceeded === undefined ? '?' : `${round(r.launcherSucceeded - r.qemuExit)} ms → status seen ${round(r.status - r.launcherSucceeded)}`} ms; ` +
        `QEMU gone → status ${round(r.status - r.qemuExit)} ms`,
    );
  }
  const steps: [string, (r: PoweroffTimes) => number | undefined][] = [
    // t0 = QEMU gone: the guest is off and libvirt has ended its process.
    ['guest_poweroff_to_status_ms', (r) => r.status - r.qemuExit],
    // t0 = before kubectl exec: adds the exec round trip and the guest's own shutdown.
    ['guest_poweroff_exec_to_status_ms', (r) => r.status - r.exec],
    ['guest_poweroff_exec_to_qemu_exit_ms', (r) => r.qemuExit - r.exec],
    ['guest_poweroff_qemu_exit_to_launcher_ms', (r) => (r.launcherSucceeded === undefined ? undefined : r.launcherSucceeded - r.qemuExit)],
    ['guest_poweroff_launcher_to_status_ms', (r) => (r.launcherSucceeded === undefined ? undefined : r.status - r.launcherSucceeded)],
  ];
  for (const [name, of] of steps) {
    const samples = runs.flatMap((r) => {
      const v = of(r);
      return v === undefined ? [] : [v];
    });
    if (samples.length === 0) continue;
    ctx.emit(`${name}_p50`, percentile(samples, 50), 'ms');
    ctx.emit(`${name}_p95`, percentile(samples, 95), 'ms');
  }
}

export const POD_BENCHMARKS: Benchmark[] = [
  {
    name: 'pods.start',
    description: `${START_PODS} pods created at once through kube-apiserver → phase Running and Ready (first console byte), after 1 warm-up pod; p50/p95 and the split`,
    run: benchStart,
  },
  {
    name: 'pods.poweroff',
    description: `${POWEROFF_PODS} restartPolicy Never pods powered off one after another (kubectl exec poweroff) → phase Succeeded in the pod status`,
    run: benchPoweroff,
  },
];

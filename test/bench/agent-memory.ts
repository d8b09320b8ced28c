// The node agent's memory as the density bench reads it: RSS from /proc, the
// V8 heap in use from its own /metrics (prom-client's nodejs_heap_size_used_bytes,
// through kube-apiserver), and on request a heap snapshot, to count what each
// VM costs the agent (objects whose count follows the VMs').
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { until, type BenchContext } from './bench.js';
import type { BenchNode } from './cluster-node.js';
import { KiB_PER_MiB } from './stats.js';

/**
 * Where the agent writes a heap snapshot at the end of the density bench
 * (started with --heapsnapshot-signal); unset, none is taken. Outside the
 * bench's temp dirs on purpose: it is the run's output, kept after it.
 */
export const HEAP_SNAPSHOT_DIR_ENV = 'VKVM_BENCH_AGENT_HEAP_SNAPSHOT_DIR';
/** A snapshot of a ~100 MiB heap takes seconds of CPU on a loaded 2-core box. */
const SNAPSHOT_TIMEOUT_MS = 180_000;

/** VmRSS of a process in MiB. */
export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) / KiB_PER_MiB;
}

/** The agent's V8 heap in use, MiB, from its /metrics. */
export async function agentHeapUsedMiB(node: BenchNode): Promise<number> {
  const r = await node.kubectl(['get', '--raw', `/api/v1/nodes/${node.nodeName}/proxy/metrics`], { timeoutMs: 60_000 });
  if (r.code !== 0) throw new Error(`reading the agent's metrics failed: ${r.stderr.trim()}`);
  const line = r.stdout.split('\n').find((l) => l.startsWith('nodejs_heap_size_used_bytes '));
  if (!line) throw new Error('the agent serves no nodejs_heap_size_used_bytes');
  return Number(line.split(' ')[1]) / 2 ** 20;
}

/** Node options for the agent: a heap snapshot on SIGUSR2 into the env's dir, when that is set. */
export function heapSnapshotNodeOptions(): string[] {
  const dir = process.env[HEAP_SNAPSHOT_DIR_ENV];
  return dir ? ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`] : [];
}

/** Asks the agent for a heap snapshot (when heapSnapshotNodeOptions gave it the signal) and waits until it is written. */
export async function takeAgentHeapSnapshot(ctx: BenchContext, node: BenchNode): Promise<void> {
  const dir = process.env[HEAP_SNAPSHOT_DIR_ENV];
  if (!dir) return;
  const snapshots = async () => new Set((await readdir(dir)).filter((f) => f.endsWith('.heapsnapshot')));
  const before = await snapshots();
  process.kill(node.agentPid, 'SIGUSR2');
  let file = '';
  let size = -1;
  // Written in one go by the agent's main thread: a file whose size holds for 2 s is complete.
  await until(
    'the agent wrote its heap snapshot',
    async () => {
      file ||= [...(await snapshots())].find((f) => !before.has(f)) ?? '';
      if (!file) return false;
      const now = (await stat(join(dir, file))).size;
      const done = now > 0 && now === size;
      size = now;
      if (!done) await sleep(2000, undefined, { signal: ctx.signal });
      return done;
    },
    SNAPSHOT_TIMEOUT_MS,
    ctx.signal,
  );
  ctx.log(`agent heap snapshot: ${join(dir, file)} (${(size / 2 ** 20).toFixed(0)} MiB)`);
}

// The leak audit: N create/delete cycles (default 200; --cycles N) of the
// mix in test/e2e/framework/vm-cycles.ts (plain pods and KubeVirt VMIs,
// bridged and masquerade, deleted gracefully or forced, once Running or while
// starting), then everything of the agent is as it was before them
// (test/helpers/leftovers.ts) and its RSS is within 10 % of what it was.
// The agent's memory is read after a full GC at both points (through the
// inspector, node-inspect.ts): an idle Node process keeps the garbage of its
// last busy minutes, which says nothing about what it retains.
// The VM and VMI controllers run in the bench's own process, as in the e2e
// tests. It fails, naming each thing left, when anything is.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { CYCLE_MIX, runCycle, runCycles, type CycleResult } from '../e2e/framework/vm-cycles.js';
import { kubeFootprint, leftSince, settledFootprint, type AuditedAgent } from '../helpers/leftovers.js';
import { until, type BenchContext, type Benchmark } from './bench.js';
import { startBenchNode } from './cluster-node.js';
import { NAMESPACE, NODE } from './pods.js';
import { inspectNodeMemory } from './node-inspect.js';
import { BYTES_PER_MiB, KiB_PER_MiB } from './stats.js';

const DEFAULT_CYCLES = 200;
/** Cycles under way at once: a few VMs starting and stopping together, as on a busy node. */
const CONCURRENCY = 4;
/** Warm-up cycles before the first footprint and RSS: one of each kind, so first uses and the agent's heap have settled. */
const WARMUP_CYCLES = CYCLE_MIX.length;
/** After the cycles, the agent is left alone this long before its RSS is read (timers, GC). */
const SETTLE_MS = 30_000;
/** Allowed growth of the agent's RSS over the cycles. */
const RSS_GROWTH_LIMIT_PCT = 10;

/** The agent's RSS as it is, then its RSS and JS heap after a full GC, MiB. */
async function agentMemory(pid: number, signal: AbortSignal): Promise<{ rss: number; rssAfterGc: number; heapAfterGc: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) / KiB_PER_MiB;
  const { afterGc } = await inspectNodeMemory(pid, signal);
  return { rss, rssAfterGc: afterGc.rss / BYTES_PER_MiB, heapAfterGc: afterGc.heapUsed / BYTES_PER_MiB };
}

async function benchLeaks(ctx: BenchContext): Promise<void> {
  const cycles = ctx.cycles ?? DEFAULT_CYCLES;
  const node = await startBenchNode(ctx, { nodeName: NODE, namespace: NAMESPACE });
  await installClusterManifests(node.cluster.kubeconfigPath);
  const controllers = startControllers(node.clients, pino({ level: 'warn' }, pino.destination(2)), { retryPeriodMs: 500 });
  ctx.defer('VM and VMI controllers', () => controllers.stop());
  const env = { clients: node.clients, namespace: node.namespace, node: NODE };
  const audited: AuditedAgent = { stateDir: node.agentStateDir, runDir: join(node.agentStateDir, 'run'), bridge: node.bridge };
  const drained = () =>
    until(
      'the agent removed every VM',
      async () =>
        (await readdir(join(audited.stateDir, 'vms')).catch(() => [])).length === 0 &&
        (await readdir(join(audited.stateDir, 'network', 'vms')).catch(() => [])).length === 0,
      300_000,
      ctx.signal,
    );

  const started = Date.now();
  const log = (r: CycleResult, done: number, of: number): void => {
    if (done % 10 === 0 || done === of)
      ctx.log(`${done}/${of} cycles (${Math.round((Date.now() - started) / 1000)} s); last: ${r.name} ${JSON.stringify(r.kind)}`);
  };
  for (let i = 0; i < WARMUP_CYCLES; i++) await runCycle(env, `warmup-${i}`, CYCLE_MIX[i]!);
  await drained();
  await sleep(SETTLE_MS, undefined, { signal: ctx.signal });
  const memBefore = await agentMemory(node.agentPid, ctx.signal);
  const before = await settledFootprint(audited);

  const t0 = Date.now();
  await runCycles(env, { count: cycles, concurrency: CONCURRENCY, prefix: 'leak', onCycle: (r, done) => log(r, done, cycles) });
  ctx.emit('leak_cycles', cycles, 'cycles');
  ctx.emit('leak_cycles_ms', Date.now() - t0, 'ms');
  await drained();
  await sleep(SETTLE_MS, undefined, { signal: ctx.signal });
  const memAfter = await agentMemory(node.agentPid, ctx.signal);
  const left = [...leftSince(before, await settledFootprint(audited)), ...leftSince({}, await kubeFootprint(node.clients, node.namespace))];
  ctx.emit('leak_things_left', left.length, 'things');
  const growthPct = (k: keyof typeof memBefore): number => (100 * (memAfter[k] - memBefore[k])) / memBefore[k];
  ctx.emit('leak_agent_rss_before_mib', memBefore.rssAfterGc, 'MiB');
  ctx.emit('leak_agent_rss_after_mib', memAfter.rssAfterGc, 'MiB');
  ctx.emit('leak_agent_rss_growth_pct', growthPct('rssAfterGc'), '%');
  ctx.emit('leak_agent_heap_before_mib', memBefore.heapAfterGc, 'MiB');
  ctx.emit('leak_agent_heap_after_mib', memAfter.heapAfterGc, 'MiB');
  ctx.emit('leak_agent_rss_without_gc_before_mib', memBefore.rss, 'MiB');
  ctx.emit('leak_agent_rss_without_gc_after_mib', memAfter.rss, 'MiB');
  const failures = [
    ...left.map((l) => `left behind: ${l}`),
    ...(growthPct('rssAfterGc') > RSS_GROWTH_LIMIT_PCT
      ? [
          `the agent's RSS after a full GC grew ${growthPct('rssAfterGc').toFixed(1)} % (${memBefore.rssAfterGc.toFixed(1)} → ${memAfter.rssAfterGc.toFixed(1)} MiB), over ${RSS_GROWTH_LIMIT_PCT} %`,
        ]
      : []),
  ];
  if (failures.length > 0) throw new Error(`the leak audit failed:\n${failures.join('\n')}`);
  ctx.log(
    `nothing left behind after ${cycles} cycles; the agent's RSS after GC ${memBefore.rssAfterGc.toFixed(1)} → ${memAfter.rssAfterGc.toFixed(1)} MiB, ` +
      `its heap ${memBefore.heapAfterGc.toFixed(1)} → ${memAfter.heapAfterGc.toFixed(1)} MiB (RSS without GC ${memBefore.rss.toFixed(1)} → ${memAfter.rss.toFixed(1)})`,
  );
}

export const LEAK_BENCHMARKS: Benchmark[] = [
  {
    name: 'leaks.cycles',
    description: `${DEFAULT_CYCLES} create/delete cycles (--cycles N) of pods and VMIs, bridged and masquerade, deleted mid-start and forced; then nothing of them is left and the agent's RSS is within ${RSS_GROWTH_LIMIT_PCT} %`,
    heavy: true,
    run: benchLeaks,
  },
];

// What one more node of `vkvm up --nodes N` costs the machine: the memory
// (RSS) and idle CPU of node 2's processes (its init, its node agent, its
// DHCP server), no VMs, after the cluster settled.
import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { nodeName } from '../../provider/local-cluster/layout.js';
import type { Benchmark, BenchContext } from './bench.js';
import { pidsWhere } from './proc.js';
import { startVkvmUp } from './vkvm-up.js';

const SETTLE_MS = 30_000;
const WINDOW_MS = 30_000;
const TICKS_PER_S = 100;

/** utime + stime of a process, in clock ticks; 0 once it is gone. */
async function cpuTicks(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
}

async function rssKiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
}

async function extraNode(ctx: BenchContext): Promise<void> {
  const node1 = 'vkvm-bench-nodes';
  await startVkvmUp(ctx, { nodes: 2, nodeName: node1, prefix: 'vkvm-bench-nodes-' });
  await sleep(SETTLE_MS, undefined, { signal: ctx.signal });
  const name = nodeName(node1, 2);
  // Its init names it; its agent and DHCP server name its directory, <state dir>/nodes/2.
  const ownDir = new RegExp(`/nodes/2(/|$)`);
  const pids = pidsWhere((argv) => argv.some((a) => ownDir.test(a) || a.includes(`"name":"${name}"`)));
  const before = await Promise.all(pids.map(cpuTicks));
  await sleep(WINDOW_MS, undefined, { signal: ctx.signal });
  const after = await Promise.all(pids.map(cpuTicks));
  const busyS = after.reduce((sum, t, i) => sum + t - before[i]!, 0) / TICKS_PER_S;
  const rss = (await Promise.all(pids.map(rssKiB))).reduce((a, b) => a + b, 0);
  ctx.log(`node 2: ${pids.length} processes, RSS ${(rss / 1024).toFixed(1)} MiB, ${busyS.toFixed(2)} CPU s in ${WINDOW_MS / 1000} s`);
  ctx.emit('nodes_extra_node_rss_mib', rss / 1024, 'MiB');
  ctx.emit('nodes_extra_node_cpu_millicores_idle', (1000 * busyS) / (WINDOW_MS / 1000), 'millicores');
}

export const NODE_BENCHMARKS: Benchmark[] = [
  {
    name: 'nodes.extra',
    description: "vkvm up --nodes 2, settled, no VMs: node 2's processes (init, agent, DHCP) in RSS and idle CPU",
    heavy: true,
    run: extraNode,
  },
];

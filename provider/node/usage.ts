// Node-level CPU and memory usage from /proc, with the meanings the kubelet
// gives its root-cgroup figures, so the eviction signal memory.available =
// capacity − working set reads the same:
//   CPU          /proc/stat "cpu" user+nice+system+irq+softirq+steal (guest time is inside user)
//   usage        MemTotal − MemFree (includes page cache, as the root cgroup's usage does)
//   working set  usage − Inactive(file)
//   RSS          AnonPages
//   available    MemTotal − working set
import { readFile } from 'node:fs/promises';
import path from 'node:path';

export interface NodeUsage {
  /** When /proc was read. */
  time: Date;
  cpuUsageCoreNanoSeconds: number;
  memoryUsageBytes: number;
  memoryWorkingSetBytes: number;
  memoryRSSBytes: number;
  memoryAvailableBytes: number;
}

export interface ProcOptions {
  /** Where procfs is mounted; tests pass a scratch dir. */
  procRoot?: string;
  now?: () => Date;
}

/**
 * USER_HZ, the unit of /proc/stat: fixed at 100 by the kernel's userspace ABI
 * on every architecture Linux exposes it for (sysconf(_SC_CLK_TCK)).
 */
const USER_HZ = 100;

/** Fields of the aggregate "cpu" line that count as busy time, by position after "cpu". */
const BUSY_FIELDS = { user: 0, nice: 1, system: 2, irq: 5, softirq: 6, steal: 7 } as const;

function procFile(opts: ProcOptions, name: string): string {
  return path.join(opts.procRoot ?? '/proc', name);
}

function parseMeminfo(text: string, file: string): (key: string) => number {
  const kib = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([^:]+):\s+(\d+)(?:\s+kB)?$/.exec(line.trim());
    if (m) kib.set(m[1]!, Number(m[2]));
  }
  return (key) => {
    const v = kib.get(key);
    if (v === undefined) throw new Error(`${file} has no ${key}`);
    return v * 1024;
  };
}

export async function readNodeUsage(opts: ProcOptions = {}): Promise<NodeUsage> {
  const statFile = procFile(opts, 'stat');
  const meminfoFile = procFile(opts, 'meminfo');
  const [stat, meminfo] = await Promise.all([readFile(statFile, 'utf8'), readFile(meminfoFile, 'utf8')]);
  const time = (opts.now ?? (() => new Date()))();
  const cpuLine = stat.split('\n').find((l) => l.startsWith('cpu '));
  if (!cpuLine) throw new Error(`${statFile} has no aggregate cpu line`);
  const ticks = cpuLine.trim().split(/\s+/).slice(1).map(Number);
  const busyTicks = Object.values(BUSY_FIELDS).reduce<number>((sum, i) => sum + (ticks[i] ?? 0), 0);
  const mem = parseMeminfo(meminfo, meminfoFile);
  const total = mem('MemTotal');
  const usage = total - mem('MemFree');
  const workingSet = Math.max(0, usage - mem('Inactive(file)'));
  return {
    time,
    cpuUsageCoreNanoSeconds: (busyTicks * 1e9) / USER_HZ,
    memoryUsageBytes: usage,
    memoryWorkingSetBytes: workingSet,
    memoryRSSBytes: mem('AnonPages'),
    memoryAvailableBytes: Math.max(0, total - workingSet),
  };
}

/** When the host booted (/proc/stat btime): the node's startTime in the Summary API. */
export async function readBootTime(opts: ProcOptions = {}): Promise<Date> {
  const file = procFile(opts, 'stat');
  const m = /^btime\s+(\d+)$/m.exec(await readFile(file, 'utf8'));
  if (!m) throw new Error(`${file} has no btime`);
  return new Date(Number(m[1]) * 1000);
}

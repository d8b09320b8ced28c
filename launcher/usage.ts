// Resource usage of a VM, read from its launcher's cgroup (<parent>/<uid>, laid
// out as cgroup.ts creates it). The cgroup holds the launcher, its libvirt
// daemon and QEMU, so this is what the VM costs the node. Figures follow
// cAdvisor, so they mean what they mean for any other pod:
//   CPU          v1 cpuacct.usage (ns)       v2 cpu.stat usage_usec × 1000
//   usage        v1 memory.usage_in_bytes    v2 memory.current
//   working set  usage − inactive file pages (v1 total_inactive_file, v2 inactive_file), floored at 0
//   RSS          v1 total_rss                v2 anon
//   limit        v1 memory.limit_in_bytes    v2 memory.max ("max" or the v1 page-rounded maximum: none)
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { cgroupDir, DEFAULT_CGROUP_ROOT, detectLayout, type Layout } from './cgroup.js';

export interface VmUsage {
  /** When the cgroup was read. */
  time: Date;
  /** Cumulative CPU time of everything in the cgroup. */
  cpuUsageCoreNanoSeconds: number;
  /** All memory charged to the cgroup, page cache included. */
  memoryUsageBytes: number;
  /** Usage minus inactive file pages (cAdvisor's working set). */
  memoryWorkingSetBytes: number;
  memoryRSSBytes: number;
  /** Absent when the cgroup has no memory limit. */
  memoryLimitBytes?: number;
}

export interface UsageOptions {
  uid: string;
  /** Path below each hierarchy's root, as given to Cgroup.create, e.g. "vkvm". */
  parent: string;
  /** Where the hierarchies are mounted; tests pass a scratch dir. */
  root?: string;
  /** A layout detected once by the caller, to skip detection on every read. */
  layout?: Layout;
  now?: () => Date;
}

/** No cgroup for this uid: the VM's launcher is not running (or never created it). */
export class CgroupNotFoundError extends Error {
  readonly kind = 'NotFound';
}

/**
 * v1 reports "no limit" as the largest page-aligned signed 64-bit value
 * (9223372036854771712 with 4 KiB pages); anything this large is no limit.
 */
const UNLIMITED_BYTES = 2 ** 62;

/** "key value" lines (memory.stat, cpu.stat) as numbers. */
export function parseFlatKeyed(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [key, value] = line.trim().split(/\s+/);
    if (key && value !== undefined && /^\d+$/.test(value)) out.set(key, Number(value));
  }
  return out;
}

function field(stats: Map<string, number>, key: string, file: string): number {
  const v = stats.get(key);
  if (v === undefined) throw new Error(`${file} has no ${key}`);
  return v;
}

async function readNumber(file: string): Promise<number> {
  const text = (await readFile(file, 'utf8')).trim();
  const n = Number(text);
  if (text === '' || !Number.isFinite(n)) throw new Error(`${file}: not a number: ${JSON.stringify(text)}`);
  return n;
}

function toLimit(raw: string): number | undefined {
  const text = raw.trim();
  if (text === 'max') return undefined;
  const n = Number(text);
  return Number.isFinite(n) && n < UNLIMITED_BYTES ? n : undefined;
}

export async function readVmUsage(opts: UsageOptions): Promise<VmUsage> {
  const layout = opts.layout ?? (await detectLayout(opts.root ?? DEFAULT_CGROUP_ROOT));
  const relPath = path.join(opts.parent, opts.uid);
  try {
    const usage = layout.version === 'v2' ? await readV2(layout, relPath) : await readV1(layout, relPath);
    return { time: (opts.now ?? (() => new Date()))(), ...usage };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new CgroupNotFoundError(`no cgroup ${layout.version}:/${relPath} for VM ${opts.uid}`, { cause: err });
    }
    throw err;
  }
}

async function readV1(layout: Layout, relPath: string): Promise<Omit<VmUsage, 'time'>> {
  const memDir = cgroupDir(layout, 'memory', relPath);
  const statFile = path.join(memDir, 'memory.stat');
  const [cpuNs, usage, stat, limit] = await Promise.all([
    readNumber(path.join(cgroupDir(layout, 'cpuacct', relPath), 'cpuacct.usage')),
    readNumber(path.join(memDir, 'memory.usage_in_bytes')),
    readFile(statFile, 'utf8').then(parseFlatKeyed),
    readFile(path.join(memDir, 'memory.limit_in_bytes'), 'utf8'),
  ]);
  return memoryFigures(cpuNs, usage, field(stat, 'total_inactive_file', statFile), field(stat, 'total_rss', statFile), toLimit(limit));
}

async function readV2(layout: Layout, relPath: string): Promise<Omit<VmUsage, 'time'>> {
  const dir = cgroupDir(layout, 'memory', relPath);
  const cpuFile = path.join(dir, 'cpu.stat');
  const statFile = path.join(dir, 'memory.stat');
  const [cpuStat, usage, stat, limit] = await Promise.all([
    readFile(cpuFile, 'utf8').then(parseFlatKeyed),
    readNumber(path.join(dir, 'memory.current')),
    readFile(statFile, 'utf8').then(parseFlatKeyed),
    readFile(path.join(dir, 'memory.max'), 'utf8'),
  ]);
  const cpuNs = field(cpuStat, 'usage_usec', cpuFile) * 1000;
  return memoryFigures(cpuNs, usage, field(stat, 'inactive_file', statFile), field(stat, 'anon', statFile), toLimit(limit));
}

function memoryFigures(cpuNs: number, usage: number, inactiveFile: number, rss: number, limit: number | undefined): Omit<VmUsage, 'time'> {
  return {
    cpuUsageCoreNanoSeconds: cpuNs,
    memoryUsageBytes: usage,
    memoryWorkingSetBytes: Math.max(0, usage - inactiveFile),
    memoryRSSBytes: rss,
    ...(limit === undefined ? {} : { memoryLimitBytes: limit }),
  };
}

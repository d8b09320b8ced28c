// CPU times of processes, from /proc/<pid>/stat, for the agent's own
// accounting of what a VM start costs (no QEMU, no guest).
import { readdir, readFile } from 'node:fs/promises';

/** USER_HZ, the unit of the times in /proc/<pid>/stat (fixed at 100 by the kernel's ABI). */
const USER_HZ = 100;
const MS_PER_TICK = 1000 / USER_HZ;

/** A process's CPU in ms: its own (utime + stime) and its reaped children's (cutime + cstime). */
export interface ProcessCpu {
  comm: string;
  selfMs: number;
  reapedChildrenMs: number;
}

/** Parses /proc/<pid>/stat (pure); undefined when it is not one. */
export function parseProcStat(stat: string): ProcessCpu | undefined {
  const open = stat.indexOf(' (');
  const close = stat.lastIndexOf(') ');
  if (open < 0 || close < open) return undefined;
  // After "(comm) " the state is field 3, so utime (14) … cstime (17) sit at 11 … 14.
  const f = stat
    .slice(close + 2)
    .split(' ')
    .map(Number);
  if (f.length < 15 || f.slice(11, 15).some((n) => !Number.isFinite(n))) return undefined;
  return { comm: stat.slice(open + 2, close), selfMs: (f[11]! + f[12]!) * MS_PER_TICK, reapedChildrenMs: (f[13]! + f[14]!) * MS_PER_TICK };
}

/** undefined when the process is gone. */
export async function processCpu(pid: number | 'self', procRoot = '/proc'): Promise<ProcessCpu | undefined> {
  const stat = await readFile(`${procRoot}/${pid}/stat`, 'utf8').catch(() => undefined);
  return stat === undefined ? undefined : parseProcStat(stat);
}

/** Children of every thread of a process (a child is listed under the thread that forked it). */
export async function childPids(pid: number, procRoot = '/proc'): Promise<number[]> {
  const tasks = await readdir(`${procRoot}/${pid}/task`).catch(() => [] as string[]);
  const out: number[] = [];
  for (const tid of tasks) {
    const text = await readFile(`${procRoot}/${pid}/task/${tid}/children`, 'utf8').catch(() => '');
    out.push(...text.trim().split(/\s+/).filter(Boolean).map(Number));
  }
  return out;
}

/**
 * CPU ms `pid` and every process below it have used, each with the children
 * it reaped, except the subtrees whose command name `skip` accepts.
 */
export async function treeCpuMs(pid: number, skip: (comm: string) => boolean, procRoot = '/proc'): Promise<number> {
  let ms = 0;
  for (const queue = [pid]; queue.length > 0;) {
    const p = queue.shift()!;
    const cpu = await processCpu(p, procRoot);
    if (!cpu || skip(cpu.comm)) continue;
    ms += cpu.selfMs + cpu.reapedChildrenMs;
    queue.push(...(await childPids(p, procRoot)));
  }
  return ms;
}

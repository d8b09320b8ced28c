// What the bench reads from /proc about processes it did not necessarily
// start: liveness, process trees, command lines and memory (PSS).
import { readdir, readFile } from 'node:fs/promises';
import { argvOf, isRunning, pidsWhere } from '../helpers/processes.js';

export { argvOf, isRunning, pidsWhere, qemuPidsOf } from '../helpers/processes.js';

/** Launcher processes started for one VM, by `--uid <uid>` on their command line. */
export function launcherPidsOf(uid: string): number[] {
  return pidsWhere((argv) => argv.some((a, i) => a === '--uid' && argv[i + 1] === uid) && !argv[0]!.includes('qemu'));
}

/** Children of every thread of a process (a child is listed under the thread that forked it). */
async function childPids(pid: number): Promise<number[]> {
  const tasks = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  const out: number[] = [];
  for (const tid of tasks) {
    const text = await readFile(`/proc/${pid}/task/${tid}/children`, 'utf8').catch(() => '');
    out.push(...text.trim().split(/\s+/).filter(Boolean).map(Number));
  }
  return out;
}

export interface ProcEntry {
  pid: number;
  ppid: number;
  comm: string;
  argv: string[];
}

/** `pid` and all its descendants, parents before children. */
export async function processTree(pid: number): Promise<ProcEntry[]> {
  const out: ProcEntry[] = [];
  const queue: [number, number][] = [[pid, 0]];
  for (let next = queue.shift(); next; next = queue.shift()) {
    const [p, ppid] = next;
    if (!isRunning(p)) continue;
    out.push({ pid: p, ppid, comm: (await readFile(`/proc/${p}/comm`, 'utf8').catch(() => '')).trim(), argv: argvOf(p) });
    for (const c of await childPids(p)) queue.push([c, p]);
  }
  return out;
}

/** Memory of one process from /proc/<pid>/smaps_rollup, in KiB. */
export interface MemRollup {
  /** Proportional set size: private pages plus each shared page divided by its sharers. */
  pssKiB: number;
  pssAnonKiB: number;
  pssFileKiB: number;
  rssKiB: number;
}

/** undefined when the process is gone. */
export async function memRollup(pid: number): Promise<MemRollup | undefined> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => undefined);
  if (!text) return undefined;
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { pssKiB: field('Pss'), pssAnonKiB: field('Pss_Anon'), pssFileKiB: field('Pss_File'), rssKiB: field('Rss') };
}

/** USER_HZ, the unit of the times in /proc/<pid>/stat (fixed at 100 by the kernel's ABI). */
const USER_HZ = 100;

/** CPU time in seconds: the process's own (utime + stime) and that of its children it reaped (cutime + cstime). */
export interface CpuTimes {
  selfS: number;
  reapedChildrenS: number;
}

/** undefined when the process is gone. */
export async function cpuTimes(pid: number): Promise<CpuTimes | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  // Fields after "(comm) ": state is field 3, so utime (14) … cstime (17) sit at 11 … 14.
  const f = stat
    .slice(stat.lastIndexOf(') ') + 2)
    .split(' ')
    .map(Number);
  if (f.length < 15) return undefined;
  return { selfS: (f[11]! + f[12]!) / USER_HZ, reapedChildrenS: (f[13]! + f[14]!) / USER_HZ };
}

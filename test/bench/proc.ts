// What the bench reads from /proc about processes it did not necessarily
// start: liveness, process trees, command lines and memory (PSS). CPU times
// come from provider/proc-cpu.ts (cpu-split.ts sums them by part).
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

/** Which part of a VM's process tree a process is; everything but qemu counts as overhead. */
export type ProcClass = 'launcher' | 'libvirtd' | 'virsh' | 'ns-helpers' | 'qemu' | 'other';

export function classify(p: ProcEntry, launcherPid: number): ProcClass {
  if (p.pid === launcherPid) return 'launcher';
  if (p.comm.startsWith('qemu-system')) return 'qemu';
  if (p.comm === 'libvirtd') return 'libvirtd';
  if (p.comm === 'virsh') return 'virsh';
  // setpriv execs unshare; unshare forks sh, PID 1 of the namespace (argv[0] vkvm-ns-init).
  if (p.comm === 'unshare' || p.comm === 'setpriv' || p.comm === 'sh') return 'ns-helpers';
  return 'other';
}

/** Memory of one process from /proc/<pid>/smaps_rollup, in KiB. */
export interface MemRollup {
  /** Proportional set size: private pages plus each shared page divided by its sharers. */
  pssKiB: number;
  pssAnonKiB: number;
  pssFileKiB: number;
  rssKiB: number;
}

/**
 * PSS of a QEMU's guest RAM and of TCG's translation cache, in KiB. Guest RAM:
 * its anonymous mappings of the guest's size (QEMU may round a mapping up by an
 * alignment of at most 2 MiB). The translation cache: QEMU's anonymous
 * executable mappings (the one place QEMU writes code; none under KVM).
 * undefined when the process is gone.
 */
export async function qemuPssParts(qemuPid: number, guestMiB: number): Promise<{ guestRamKiB: number; tbCacheKiB: number } | undefined> {
  const text = await readFile(`/proc/${qemuPid}/smaps`, 'utf8').catch(() => undefined);
  if (text === undefined) return undefined;
  const parts = { guestRamKiB: 0, tbCacheKiB: 0 };
  for (const block of text.split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    if (/^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+[ \t]+\S/.test(block)) continue; // a file or [heap]/[stack]: not anonymous
    const size = Number(/^Size:\s+(\d+) kB/m.exec(block)?.[1] ?? 0);
    const pss = Number(/^Pss:\s+(\d+) kB/m.exec(block)?.[1] ?? 0);
    if (/^[0-9a-f]+-[0-9a-f]+ ..x/.test(block)) parts.tbCacheKiB += pss;
    else if (size >= guestMiB * 1024 && size <= (guestMiB + 2) * 1024) parts.guestRamKiB += pss;
  }
  return parts;
}

/** PSS of a QEMU's guest RAM, in KiB (qemuPssParts); undefined when the process is gone. */
export async function guestRamPssKiB(qemuPid: number, guestMiB: number): Promise<number | undefined> {
  return (await qemuPssParts(qemuPid, guestMiB))?.guestRamKiB;
}

/** undefined when the process is gone. */
export async function memRollup(pid: number): Promise<MemRollup | undefined> {
  const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => undefined);
  if (!text) return undefined;
  const field = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  return { pssKiB: field('Pss'), pssAnonKiB: field('Pss_Anon'), pssFileKiB: field('Pss_File'), rssKiB: field('Rss') };
}

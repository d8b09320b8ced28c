// Fault injection for e2e tests: the processes of one VM on the host (its
// launcher, libvirtd, QEMU), what of a VM is left on the host (processes,
// cgroups, network namespace, veth, files), a simulated host reboot, the API
// server taken away, and a small filesystem to fill.
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual, promisify } from 'node:util';
import type { Test } from 'tap';
import { DEFAULTS as LAUNCHER_DEFAULTS } from '../../../launcher/args.js';
import { isLauncherAlive, readStateFile, STATE_FILE_NAME } from '../../../launcher/state.js';
import { vmNetworkNames } from '../../../provider/network/vm-network.js';
import { argvOf, isRunning, pidsWhere } from '../../helpers/processes.js';
import type { AgentProcess } from './agent.js';
import { poll } from './wait.js';

const execFileP = promisify(execFile);

/** The VM's cgroup in each hierarchy vkvm uses (v1 controllers, or the unified one). */
const cgroupDirsOf = (uid: string): string[] =>
  ['pids', 'memory', 'cpu', ''].map((c) => join('/sys/fs/cgroup', c, LAUNCHER_DEFAULTS.cgroupParent, uid));

const commOf = (pid: number): Promise<string> =>
  readFile(`/proc/${pid}/comm`, 'utf8').then(
    (s) => s.trim(),
    () => '',
  );

/** Processes in the VM's cgroup, as "comm:pid". */
export async function processesInCgroupOf(uid: string): Promise<string[]> {
  const pids = new Set<number>();
  for (const dir of cgroupDirsOf(uid)) {
    const procs = await readFile(join(dir, 'cgroup.procs'), 'utf8').catch(() => '');
    for (const p of procs.split('\n').filter(Boolean)) pids.add(Number(p));
  }
  const running = [...pids].filter(isRunning).sort((a, b) => a - b);
  return Promise.all(running.map(async (pid) => `${await commOf(pid)}:${pid}`));
}

/** The launcher's pid from its state file; throws when it has none or the process is gone. */
export async function launcherPidOf(agent: AgentProcess, uid: string): Promise<number> {
  const state = await readStateFile(join(agent.stateDir, 'vms', uid, STATE_FILE_NAME));
  if (!(await isLauncherAlive(state))) throw new Error(`the launcher of ${uid} (pid ${state.pid}) does not run`);
  return state.pid;
}

/** The one process named `comm` in the VM's cgroup (libvirtd, qemu-system-x86). */
export async function vmProcess(uid: string, comm: string): Promise<number> {
  const found = (await processesInCgroupOf(uid)).filter((p) => p.startsWith(`${comm}`));
  if (found.length !== 1) throw new Error(`want one ${comm} in the cgroup of ${uid}, found ${JSON.stringify(found)}`);
  return Number(found[0]!.split(':')[1]);
}

/** Everything of one VM on the host, by pod UID: empty lists and false once the VM is wholly gone. */
export interface HostTraces {
  /** In its cgroup, or naming its UID on their command line (launcher, QEMU of a plain pod, dnsmasq). */
  processes: string[];
  cgroups: string[];
  netns: boolean;
  hostVeth: boolean;
  vmDir: boolean;
  networkDir: boolean;
  launcherSocket: boolean;
}

export async function hostTracesOf(agent: AgentProcess, uid: string): Promise<HostTraces> {
  const byArgv = pidsWhere((argv) => argv.some((a) => a.includes(uid))).map((pid) => `${argvOf(pid)[0]}:${pid}`);
  const links = (await execFileP('ip', ['-o', 'link', 'show'])).stdout;
  const names = vmNetworkNames(uid);
  return {
    processes: [...new Set([...(await processesInCgroupOf(uid)), ...byArgv])],
    cgroups: cgroupDirsOf(uid).filter((d) => existsSync(d)),
    netns: existsSync(names.netnsPath),
    hostVeth: new RegExp(`^\\d+: ${names.hostVeth}[@:]`, 'm').test(links),
    vmDir: existsSync(join(agent.stateDir, 'vms', uid)),
    networkDir: existsSync(join(agent.stateDir, 'network', 'vms', uid)),
    launcherSocket: existsSync(join(agent.stateDir, 'run', 'launchers', `${uid}.sock`)),
  };
}

export const NO_TRACES: HostTraces = {
  processes: [],
  cgroups: [],
  netns: false,
  hostVeth: false,
  vmDir: false,
  networkDir: false,
  launcherSocket: false,
};

/** Polls until what is left of the VM is `expected` (processes die and files go asynchronously); returns what is left then. */
export async function untilTraces(agent: AgentProcess, uid: string, expected: HostTraces, deadlineMs = 30_000): Promise<HostTraces> {
  return poll(
    `what is left of ${uid} to be ${JSON.stringify(expected)}`,
    () => hostTracesOf(agent, uid),
    (tr) => isDeepStrictEqual(tr, expected),
    { deadlineMs, intervalMs: 200 },
  ).catch(() => hostTracesOf(agent, uid));
}

async function untilNoProcesses(uid: string): Promise<void> {
  await poll(
    `no process of ${uid} left`,
    () => processesInCgroupOf(uid),
    (left) => left.length === 0,
    { deadlineMs: 20_000, intervalMs: 200 },
  );
}

/**
 * What a host reboot does to a node, short of rebooting: every process vkvm
 * runs for the node dies at once (the agent, each launcher with its libvirtd
 * and QEMU, the DHCP servers), and what lives in tmpfs or in the kernel
 * without a process goes: the run dir and the VMs' network namespaces (with
 * their veths and taps). The state dir survives, as a disk does. Returns the
 * launcher pids that ran.
 */
export async function simulateReboot(agent: AgentProcess): Promise<number[]> {
  await agent.kill('SIGKILL');
  const vmsDir = join(agent.stateDir, 'vms');
  const uids = await readdir(vmsDir).catch(() => [] as string[]);
  const launchers: number[] = [];
  for (const uid of uids) {
    const state = await readStateFile(join(vmsDir, uid, STATE_FILE_NAME)).catch(() => undefined);
    if (state && (await isLauncherAlive(state))) {
      launchers.push(state.pid);
      process.kill(state.pid, 'SIGKILL');
    }
  }
  const networkDir = join(agent.stateDir, 'network');
  const pidFiles = [join(networkDir, 'dnsmasq.pid'), ...uids.map((uid) => join(networkDir, 'vms', uid, 'dnsmasq.pid'))];
  for (const file of pidFiles) {
    const pid = Number(await readFile(file, 'utf8').catch(() => ''));
    if (pid > 0 && isRunning(pid) && (await commOf(pid)) === 'dnsmasq') process.kill(pid, 'SIGKILL');
  }
  // QEMU dies with its launcher (the death signal reaches its PID namespace); wait for that before its netns goes.
  for (const uid of uids) await untilNoProcesses(uid);
  for (const uid of uids) {
    const { netns } = vmNetworkNames(uid);
    if (existsSync(vmNetworkNames(uid).netnsPath)) await execFileP('ip', ['netns', 'del', netns]);
  }
  await rm(join(agent.stateDir, 'run'), { recursive: true, force: true });
  return launchers;
}

/** The kube-apiserver of a test cluster (a child of its vkvm-cluster up; its flags name the cluster's state dir). */
export function apiServerPids(cluster: { stateDir: string }): number[] {
  return pidsWhere((argv) => argv[1] === 'kube-apiserver' && argv.some((a) => a.includes(cluster.stateDir)));
}

/**
 * Takes the API server away for `downMs`: vkvm-cluster up is stopped (so
 * etcd, which it embeds, is frozen too, and it cannot start the API server
 * again yet), the API server killed, and after `downMs` up continues and
 * starts a new API server, as it does for any component that exits.
 * Resolves once the old API server is gone and `downMs` passed.
 */
export async function takeApiServerDown(cluster: { pid: number; stateDir: string }, downMs: number): Promise<{ killed: number[] }> {
  const killed = apiServerPids(cluster);
  if (killed.length !== 1) throw new Error(`want one kube-apiserver of ${cluster.stateDir}, found ${JSON.stringify(killed)}`);
  process.kill(cluster.pid, 'SIGSTOP');
  try {
    process.kill(killed[0]!, 'SIGKILL');
    await new Promise((r) => setTimeout(r, downMs));
  } finally {
    process.kill(cluster.pid, 'SIGCONT');
  }
  return { killed };
}

export interface LoopFilesystem {
  /** Where it is mounted. */
  dir: string;
  /** Takes every free block (root's reserve too: there is none). */
  fill(): Promise<void>;
  /** Gives the blocks fill() took back. */
  unfill(): Promise<void>;
}

/**
 * A small ext4 filesystem on a loop device, unmounted and removed in `t`'s
 * teardown. Register it before whatever uses it, so it goes after.
 */
export async function loopFilesystem(t: Test, sizeMiB: number): Promise<LoopFilesystem> {
  const base = await mkdtemp(join(tmpdir(), 'vkvm-e2e-fs-'));
  const image = join(base, 'fs.img');
  const dir = join(base, 'mnt');
  await execFileP('truncate', ['-s', `${sizeMiB}M`, image]);
  await execFileP('mkfs.ext4', ['-q', '-m', '0', image]);
  await mkdir(dir);
  await execFileP('mount', ['-o', 'loop', image, dir]);
  // QEMU (unprivileged) reaches VM files below the mount, as below any --state-dir.
  await chmod(base, 0o711);
  t.teardown(async () => {
    // Lazily, should a process still hold a file there: the mount goes once it lets go.
    await execFileP('umount', [dir]).catch(() => execFileP('umount', ['-l', dir]));
    await rm(base, { recursive: true, force: true });
  });
  const filler = join(dir, 'filler');
  return {
    dir,
    fill: async () => {
      const avail = Number((await execFileP('df', ['-B1', '--output=avail', dir])).stdout.split('\n')[1]);
      await execFileP('fallocate', ['-l', String(avail), filler]).catch(() => undefined);
      // What fallocate could not take in one extent: written until ENOSPC (dd then fails, as it should).
      await execFileP('dd', ['if=/dev/zero', `of=${filler}-rest`, 'bs=4k']).catch(() => undefined);
    },
    unfill: async () => {
      await rm(filler, { force: true });
      await rm(`${filler}-rest`, { force: true });
    },
  };
}

// Launchers started by a benchmark, the way the node agent starts them
// (spawn.ts with the built launcher, dist/launcher/main.js), and removed
// again whatever happens: SIGKILL by PID, wait for QEMU to go, remove the
// cgroup and the run dir. The cleanup is registered before the launcher is
// spawned and finds it by `--uid <uid>` as well, so a launcher whose start-up
// failed half-way is removed too.
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cgroup } from '../../launcher/cgroup.js';
import type { LauncherClient } from '../../launcher/client.js';
import { spawnLauncher } from '../../launcher/spawn.js';
import { DEFAULT_GUEST_CACHE_DIR, type TestGuest } from '../../vmm/guest/build.js';
import { VM_SPEC_VERSION, type VmSpec } from '../../vmm/spec.js';
import { abortable, until, type BenchContext } from './bench.js';
import { isRunning, launcherPidsOf, qemuPidsOf } from './proc.js';

/** The launcher's default; the bench's VMs sit beside the node agent's. */
const CGROUP_PARENT = 'vkvm';
const STOP_TIMEOUT_MS = 15_000;

export interface BenchLauncher {
  uid: string;
  runDir: string;
  pid: number;
  client: LauncherClient;
  logFile: string;
  /** performance.now() right before spawnLauncher and right after it returned (socket accepting, client connected). */
  spawnStartMs: number;
  readyMs: number;
  /** Kills and removes this launcher now rather than at the end of the benchmark. Idempotent. */
  remove(): Promise<void>;
}

/** A small test-guest VM: 1 vCPU, no disks, no NICs, no guest agent. */
export function benchVmSpec(uid: string, guest: TestGuest, memoryMiB: number): VmSpec {
  return {
    version: VM_SPEC_VERSION,
    uid,
    name: `bench-${uid.slice(0, 8)}`,
    cpu: { sockets: 1, cores: 1, threads: 1 },
    memoryMiB,
    firmware: { kind: 'bios' },
    kernelBoot: { kernelPath: guest.kernelPath, initrdPath: guest.initrdPath, cmdline: guest.cmdline },
    disks: [],
    interfaces: [],
    guestAgent: false,
    acpi: true,
    labels: { bench: 'launcher' },
  };
}

/** Kills every process of the VM and removes its cgroup and run dir. Runs to the end even after Ctrl-C. */
async function removeVm(uid: string, runDir: string, knownPid: number | undefined, cgroupParent: string): Promise<void> {
  const never = new AbortController().signal;
  const pids = new Set([...(knownPid ? [knownPid] : []), ...launcherPidsOf(uid)]);
  for (const pid of pids) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  // The launcher's death kills unshare (pdeathsig), whose death ends the PID namespace and QEMU in it.
  await until(
    `launcher ${[...pids].join(',') || '(none)'} and QEMU of ${uid} are gone`,
    () => [...pids].every((p) => !isRunning(p)) && qemuPidsOf(uid).length === 0,
    STOP_TIMEOUT_MS,
    never,
  );
  // removeLeftover refuses while the cgroup holds processes, and rmdir is EBUSY
  // for a moment after the last one left.
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  for (let delayMs = 10; ; delayMs = Math.min(delayMs * 2, 250)) {
    try {
      await Cgroup.removeLeftover({ uid, parent: cgroupParent });
      break;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`removing the cgroup of ${uid}`, { cause: err });
    }
    await sleep(delayMs);
  }
  await rm(runDir, { recursive: true, force: true });
}

/** The launchers may boot the test guest's kernel and initrd from its build cache (host paths, not images), and nothing else of the host. */
const GUEST_FILES = { imageDirs: [DEFAULT_GUEST_CACHE_DIR], hostDiskDirs: [], deniedDirs: [] };

/** A second launcher of one VM (a migration's target) as a simulated node: its own cgroup parent and QEMU uid. */
export interface LauncherPlacement {
  uid: string;
  cgroupParent: string;
  qemuUid: number;
  /** More host directories its VM's images may come from. */
  imageDirs: string[];
}

/** Spawns a launcher for a fresh VM uid (or as `placement` says); its removal is registered with ctx first. */
export async function startLauncher(ctx: BenchContext, placement?: LauncherPlacement): Promise<BenchLauncher> {
  ctx.signal.throwIfAborted();
  const uid = placement?.uid ?? randomUUID();
  const cgroupParent = placement?.cgroupParent ?? CGROUP_PARENT;
  // Short: unix socket paths below it must stay under 108 bytes.
  const runDir = await mkdtemp('/tmp/vkvm-b-');
  const spawnStartMs = performance.now();
  const hostFiles = { ...GUEST_FILES, imageDirs: [...GUEST_FILES.imageDirs, ...(placement?.imageDirs ?? [])] };
  const spawning = spawnLauncher({
    args: { uid, runDir, cgroupParent, hostFiles, ...(placement ? { qemuUid: placement.qemuUid } : {}) },
  });
  let removed: Promise<void> | undefined;
  const remove = (): Promise<void> => {
    removed ??= (async () => {
      // Let a start-up in flight settle first, so the launcher it spawns is seen.
      const l = await spawning.catch(() => undefined);
      l?.client.close();
      await removeVm(uid, runDir, l?.pid, cgroupParent);
    })();
    return removed;
  };
  ctx.defer(`launcher ${uid}`, remove);
  const l = await abortable(spawning, ctx.signal);
  return { uid, runDir, pid: l.pid, client: l.client, logFile: l.logFile, spawnStartMs, readyMs: performance.now(), remove };
}

/** A launcher log line's step marks (launcher/phases.ts): ms each step ended, since the line's reference. */
export type PhaseMarks = Record<string, number>;

function phaseMarks(v: unknown): PhaseMarks | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const marks = Object.entries(v).filter((e): e is [string, number] => typeof e[1] === 'number');
  return Object.fromEntries(marks);
}

/** The first JSON line of the launcher's log with message `msg`. */
async function launcherLogLine(logFile: string, msg: string): Promise<Record<string, unknown> | undefined> {
  const text = await readFile(logFile, 'utf8').catch(() => '');
  for (const line of text.split('\n')) {
    if (!line.includes(JSON.stringify(msg))) continue;
    try {
      const j = JSON.parse(line) as Record<string, unknown>;
      if (j.msg === msg) return j;
    } catch {
      // not pino's JSON: ignore
    }
  }
  return undefined;
}

/**
 * The launcher's own "launcher ready" log line: ms spent in run() and in starting libvirtd, how its code cache
 * served, and its step marks (ms since the process started).
 */
export async function readyLogLine(
  logFile: string,
): Promise<{ ms: number; libvirtdMs: number; codeCache?: string; phases?: PhaseMarks } | undefined> {
  const j = await launcherLogLine(logFile, 'launcher ready');
  if (!j || typeof j.ms !== 'number' || typeof j.libvirtdMs !== 'number') return undefined;
  const phases = phaseMarks(j.phases);
  return {
    ms: j.ms,
    libvirtdMs: j.libvirtdMs,
    ...(typeof j.codeCache === 'string' ? { codeCache: j.codeCache } : {}),
    ...(phases ? { phases } : {}),
  };
}

/** The step marks of the launcher's "VM started" line: ms since SyncVm's start began. */
export async function startedLogPhases(logFile: string): Promise<PhaseMarks | undefined> {
  return phaseMarks((await launcherLogLine(logFile, 'VM started'))?.phases);
}

/** Resolves once `file` contains `text`; for the console log, which has no change notification the bench can rely on. */
export async function waitForTextInFile(file: string, text: string, timeoutMs: number, signal: AbortSignal): Promise<void> {
  await until(
    `${file} contains ${JSON.stringify(text)}`,
    async () => (await readFile(file, 'utf8').catch(() => '')).includes(text),
    timeoutMs,
    signal,
  );
}

// The agent's view of its launchers: one per VM, in <vmsDir>/<uid>. A launcher
// outlives the agent, so the registry is rebuilt from those directories at
// start-up (discover) before anything acts; afterwards it tracks every
// launcher's state through WatchEvents and tells the owner which VM changed.
// It never decides anything about pods: that is the controller's job.
import { mkdir, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../log.js';
import { unsearchableDir, unsearchableMessage, vmsDirTooLong } from '../preflight/state-dir.js';
import { QemuUids } from './qemu-uids.js';
import { treeCpuMs } from '../proc-cpu.js';
import type { HostFilePolicy, VolumeViewEntry } from '../../vmm/host-files.js';
import type { DownloadPolicy } from '../../vmm/disks/download-policy.js';
import type { VmSpec } from '../../vmm/spec.js';
import {
  LauncherClient,
  LauncherGoneError,
  launcherGone,
  type LauncherGone,
  LAUNCHER_DEFAULTS,
  Cgroup,
  spawnLauncher,
  isLauncherAlive,
  readStateFile,
  STATE_FILE_NAME,
  type VmState,
  withDeadline,
} from '../../launcher/agent-api.js';

export interface LauncherSettings {
  /** Parent of the per-VM directories. */
  vmsDir: string;
  /** Launcher gRPC sockets live here as <uid>.sock (volatile: a run dir). */
  socketDir: string;
  imageCacheDir: string;
  libvirtCacheDir: string;
  /** Which host files VMs may name; passed to every launcher. */
  hostFiles: HostFilePolicy;
  /** Where image URLs may lead; passed to every launcher. */
  downloads: DownloadPolicy;
  allowSoftwareEmulation: boolean;
  logLevel: string;
  /** Below each cgroup hierarchy, the parent of the VMs' cgroups (default vkvm); one per node on a machine. */
  cgroupParent?: string;
  /** The first uid of the node's QEMU uid range (default QEMU_UID_BASE); one range per node on a machine. */
  qemuUidBase?: number;
  /** Launchers (and so VMs) die with the agent, however it dies (vkvm up); otherwise they outlive it. */
  dieWithAgent?: boolean;
  /** A VM's launcher and directory are gone for good (its pod is). */
  onRemoved?: (uid: string) => void;
  /** Tests run the launcher from source: node options and entry script. */
  nodeArgs?: string[];
  entry?: string;
}

/** One VM's launcher as last seen: connected and reporting, or gone with a reason. */
export type LauncherView<C = LauncherClient> =
  LiveLauncher<C> | { uid: string; dir: string; live: false; gone: LauncherGone; lastState?: VmState };
export type LiveLauncher<C = LauncherClient> = { uid: string; dir: string; live: true; client: C; state: VmState; pid: number };

/** What the pod controller asks of a running VM's launcher (LauncherClient). */
export interface VmControl {
  syncVm(spec: VmSpec): Promise<{ state: VmState }>;
  pause(): Promise<unknown>;
  unpause(): Promise<unknown>;
  /** Destroys the VM; with `failure` its run ends Failed with that cause (a failed liveness probe). */
  kill(failure?: { reason: string; message: string }): Promise<unknown>;
}

/** How to start a VM's launcher. */
export interface StartOptions {
  /** The VM's network namespace, where its taps are. */
  netns?: string;
  /** Directories of its PersistentVolume disks and its published devices, which its QEMU must see (persistentVolumeDirs). */
  volumeDirs?: VolumeViewEntry[];
}

/**
 * The launchers as the pod controller uses them (LauncherRegistry; a fake in
 * its unit tests). `C` is the client of a live launcher.
 */
export interface Launchers<C = LauncherClient> {
  /** Calls `handler` after every state change of a VM (a new state, the launcher gone); it must not block. */
  onChange(handler: (uid: string) => void): void;
  get(uid: string): LauncherView<C> | undefined;
  uids(): string[];
  prepare(): Promise<void>;
  discover(): Promise<string[]>;
  start(uid: string, opts?: StartOptions): Promise<LiveLauncher<C>>;
  stop(uid: string, gracePeriodS: number): Promise<void>;
  forget(uid: string): void;
  remove(uid: string): Promise<void>;
  close(): void;
  /** CPU ms the VM's launcher and its helpers (libvirtd, virsh, namespace set-up, what they reaped) have used, QEMU's aside; 0 when none runs. */
  cpuMs(uid: string): Promise<number>;
}

interface Entry {
  view: LauncherView;
  stopWatching?: () => void;
}

/**
 * A launcher that exited cleanly removed its cgroup; one that was killed left
 * it behind, and its QEMU may take a moment to die after it.
 */
async function removeCgroupOf(uid: string, parent: string): Promise<void> {
  for (let attempt = 0, delayMs = 20; ; attempt++, delayMs *= 2) {
    try {
      return await Cgroup.removeLeftover({ uid, parent });
    } catch (err) {
      if (attempt >= 8) throw err;
      await new Promise((r) => setTimeout(r, delayMs));
    }
  }
}

/**
 * The launcher records its exit before its last clean-up (closing the gRPC
 * server): wait for the process itself, so "stopped" means nothing of it runs.
 */
async function untilProcessExited(dir: string, timeoutMs = 10_000): Promise<void> {
  const state = await readStateFile(path.join(dir, STATE_FILE_NAME)).catch(() => undefined);
  if (!state) return;
  const deadline = Date.now() + timeoutMs;
  for (let delayMs = 10; await isLauncherAlive(state); delayMs = Math.min(delayMs * 2, 200)) {
    if (Date.now() > deadline) {
      process.kill(state.pid, 'SIGKILL');
      return;
    }
    await new Promise((r) => setTimeout(r, delayMs));
  }
}

export class LauncherRegistry implements Launchers {
  private readonly entries = new Map<string, Entry>();
  /**
   * Starts under way, by VM: until one resolves its launcher is not in
   * `entries` and has no state file yet. The pod controller never stops a
   * VM its own sync is starting, but the periodic repair runs beside it:
   * discover would take the launcher for a dead one, and the removal of an
   * orphan (its pod force-deleted meanwhile) would find nothing to stop and
   * delete the directory under the starting launcher.
   */
  private readonly starting = new Map<string, Promise<unknown>>();
  private readonly goneWaiters = new Map<string, Array<() => void>>();
  private readonly qemuUids: QemuUids;
  private readonly changeHandlers: Array<(uid: string) => void> = [];

  constructor(
    private readonly settings: LauncherSettings,
    private readonly log: Logger,
  ) {
    this.qemuUids = new QemuUids(settings.vmsDir, settings.qemuUidBase);
  }

  /** The parent of the VMs' cgroups, where their usage is read. */
  get cgroupParent(): string {
    return this.settings.cgroupParent ?? LAUNCHER_DEFAULTS.cgroupParent;
  }

  onChange(handler: (uid: string) => void): void {
    this.changeHandlers.push(handler);
  }

  dirOf(uid: string): string {
    return path.join(this.settings.vmsDir, uid);
  }

  get(uid: string): LauncherView | undefined {
    return this.entries.get(uid)?.view;
  }

  /** The uid the VM's QEMU runs as (which owns the sockets it binds), once its launcher was started or found. */
  qemuUidOf(uid: string): number | undefined {
    return this.qemuUids.of(uid);
  }

  uids(): string[] {
    return [...this.entries.keys()];
  }

  /**
   * Creates vmsDir and checks that QEMU, which runs as an unprivileged user,
   * can reach the disks below it: every directory on the way needs o+x.
   */
  async prepare(): Promise<void> {
    await mkdir(this.settings.vmsDir, { recursive: true, mode: 0o711 });
    const blocked = await unsearchableDir(this.settings.vmsDir);
    if (blocked) throw new Error(unsearchableMessage(blocked));
    const long = vmsDirTooLong(this.settings.vmsDir);
    if (long) throw new Error(long);
    await this.qemuUids.load();
  }

  /** Re-attaches to every launcher left in vmsDir (agent restart); dead ones are kept with their reason. */
  async discover(): Promise<string[]> {
    const names = await readdir(this.settings.vmsDir).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return [];
      throw err;
    });
    for (const uid of names) {
      // A launcher being started has no state file yet: it would pass for a dead one.
      if (this.entries.has(uid) || this.starting.has(uid)) continue;
      const dir = this.dirOf(uid);
      let client: LauncherClient | undefined;
      try {
        client = await LauncherClient.connect(dir);
        const info = await client.info();
        await this.track(uid, dir, client, info.launcherPid);
        this.log.info({ vm: uid, pid: info.launcherPid }, 're-attached to a running launcher');
      } catch (err) {
        client?.close();
        const gone = err instanceof LauncherGoneError ? err.gone : await launcherGone(dir);
        if (!gone) {
          // Alive but not answering: neither stopped nor usable. Left out, so nothing starts a
          // second launcher on its disks; the next discover() tries again.
          this.log.warn({ err, vm: uid }, 'a running launcher does not answer; will retry');
          continue;
        }
        this.entries.set(uid, { view: { uid, dir, live: false, gone } });
        this.log.info({ vm: uid, reason: gone.reason }, 'found the directory of a stopped launcher');
      }
    }
    return this.uids();
  }

  /**
   * Spawns a launcher for `uid` (its directory may hold the previous run's
   * console log).
   */
  async start(uid: string, opts: StartOptions = {}): Promise<LiveLauncher> {
    const pending = this.startNow(uid, opts);
    this.starting.set(uid, pending);
    try {
      return await pending;
    } finally {
      if (this.starting.get(uid) === pending) this.starting.delete(uid);
    }
  }

  /** Lets a start of `uid` under way finish (or fail) first. */
  private async afterStart(uid: string): Promise<void> {
    await this.starting.get(uid)?.catch(() => undefined);
  }

  private async startNow(uid: string, opts: StartOptions): Promise<LiveLauncher> {
    const current = this.entries.get(uid)?.view;
    if (current?.live) return current;
    const dir = this.dirOf(uid);
    const s = this.settings;
    await mkdir(s.socketDir, { recursive: true, mode: 0o700 });
    await mkdir(dir, { recursive: true, mode: 0o711 });
    const qemuUid = await this.qemuUids.take(uid);
    const spawned = await spawnLauncher({
      args: {
        uid,
        runDir: dir,
        socket: path.join(s.socketDir, `${uid}.sock`),
        qemuUid,
        cgroupParent: this.cgroupParent,
        imageCacheDir: s.imageCacheDir,
        libvirtCacheDir: s.libvirtCacheDir,
        hostFiles: s.hostFiles,
        downloads: s.downloads,
        allowSoftwareEmulation: s.allowSoftwareEmulation,
        logLevel: s.logLevel,
        ...opts,
      },
      ...(s.nodeArgs ? { nodeArgs: s.nodeArgs } : {}),
      ...(s.entry ? { entry: s.entry } : {}),
      ...(s.dieWithAgent ? { dieWithParent: true } : {}),
    });
    return this.track(uid, dir, spawned.client, spawned.pid);
  }

  /**
   * Stops the VM (ACPI, destroy after the grace period) and waits until its
   * launcher has exited and cleaned up; a launcher that does not answer or
   * exit in time is killed, which takes QEMU with it. A start under way is
   * let finish first, so its launcher is stopped too. Idempotent.
   */
  async stop(uid: string, gracePeriodS: number): Promise<void> {
    await this.afterStart(uid);
    const view = this.get(uid);
    if (!view?.live) return;
    const exitDeadlineMs = (gracePeriodS + 30) * 1000;
    try {
      await (gracePeriodS > 0 ? view.client.shutdown(gracePeriodS) : view.client.kill());
      await this.untilGone(uid, exitDeadlineMs);
    } catch (err) {
      this.log.warn({ err, vm: uid, pid: view.pid }, 'launcher did not stop cleanly; killing it');
      const state = await readStateFile(path.join(view.dir, STATE_FILE_NAME)).catch(() => undefined);
      // Checked by start time too: the pid may belong to another process by now.
      if (state && (await isLauncherAlive(state))) process.kill(state.pid, 'SIGKILL');
      await this.untilGone(uid, 30_000);
    }
    await untilProcessExited(view.dir);
    // Killed here or mid-exit, it left them; its directory stays until the pod goes.
    await this.removeLeftovers(uid);
  }

  /** What a killed launcher leaves besides its directory: its cgroup, and its socket (it removes that only when it exits). */
  private async removeLeftovers(uid: string): Promise<void> {
    await removeCgroupOf(uid, this.cgroupParent);
    await rm(path.join(this.settings.socketDir, `${uid}.sock`), { force: true });
  }

  /** Drops a stopped launcher's entry but keeps its directory: the next start reuses it (previous console log). */
  forget(uid: string): void {
    const entry = this.entries.get(uid);
    if (entry?.view.live) throw new Error(`launcher of ${uid} still runs`);
    this.entries.delete(uid);
  }

  /** Forgets a launcher and deletes its directory (console logs included). Its launcher must have exited. */
  async remove(uid: string): Promise<void> {
    await this.afterStart(uid);
    if (!(await launcherGone(this.dirOf(uid)))) throw new Error(`the launcher of ${uid} still runs; not removing its directory`);
    // Its exit record comes before its last clean-up (and its last log line, into this directory): a directory
    // removed before the process is gone would be partly written again.
    await untilProcessExited(this.dirOf(uid));
    const entry = this.entries.get(uid);
    entry?.stopWatching?.();
    if (entry?.view.live) entry.view.client.close();
    this.entries.delete(uid);
    await this.removeLeftovers(uid);
    await rm(this.dirOf(uid), { recursive: true, force: true });
    this.qemuUids.release(uid);
    this.settings.onRemoved?.(uid);
  }

  async cpuMs(uid: string): Promise<number> {
    const view = this.get(uid);
    return view?.live ? treeCpuMs(view.pid, (comm) => comm.startsWith('qemu-system')) : 0;
  }

  /** Stops following launchers (agent shutdown); the launchers and their VMs keep running. */
  close(): void {
    for (const e of this.entries.values()) {
      e.stopWatching?.();
      if (e.view.live) e.view.client.close();
    }
    this.entries.clear();
  }

  private untilGone(uid: string, timeoutMs: number): Promise<void> {
    const gone = new Promise<void>((resolve) => {
      const check = (): void => {
        const entry = this.entries.get(uid);
        if (!entry || !entry.view.live) return resolve();
        const waiters = this.goneWaiters.get(uid) ?? [];
        waiters.push(check);
        this.goneWaiters.set(uid, waiters);
      };
      check();
    });
    return withDeadline(gone, timeoutMs, `waiting for the launcher of ${uid} to exit`);
  }

  private notify(uid: string): void {
    const waiters = this.goneWaiters.get(uid) ?? [];
    this.goneWaiters.delete(uid);
    for (const w of waiters) w();
    for (const handler of this.changeHandlers) handler(uid);
  }

  private async track(uid: string, dir: string, client: LauncherClient, pid: number): Promise<LiveLauncher> {
    let state: VmState;
    try {
      state = await client.getState();
    } catch (err) {
      client.close();
      throw err;
    }
    const view = { uid, dir, live: true as const, client, state, pid };
    const entry: Entry = { view };
    this.entries.set(uid, entry);
    entry.stopWatching = client.watchEvents({
      onState: (s) => {
        // A late message from a stream of an earlier launcher of this VM must not overwrite a newer one.
        if (entry.view.live && s.generation >= entry.view.state.generation) {
          entry.view = { ...entry.view, state: s };
          this.notify(uid);
        }
      },
      onGone: (gone) => {
        if (this.entries.get(uid) !== entry) return;
        client.close();
        entry.view = { uid, dir, live: false, gone, ...(entry.view.live ? { lastState: entry.view.state } : {}) };
        this.log.info({ vm: uid, reason: gone.reason, message: gone.message }, 'launcher gone');
        this.notify(uid);
      },
    });
    return view;
  }
}

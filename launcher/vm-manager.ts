// The launcher's logic: one VM, driven by the RPCs (through server.ts) and by libvirt's lifecycle events. Mutating
// operations run one at a time; state is re-derived from libvirt after every event and operation and published to
// watchers only when it changed.
import { isDeepStrictEqual } from 'node:util';
import type { DomainRuntime } from '../vmm/domain/runtime.js';
import { domainUuidOf, firmwareOnConsole, type VmSpec } from '../vmm/spec.js';
import { parseSpec } from './spec-parse.js';
import { SerialConsole, type ConsoleListener } from './console/serial.js';
import type { LifecycleEvent } from './domain-driver.js';
import { checkDiskResize } from './disk-resize.js';
import { PreconditionError } from './errors.js';
import { agentOf, guestAgent, type GuestAgent } from './guest-queries.js';
import { cgroupLimits } from './limits.js';
import { cpuWeightIn } from './run-cpu-weight.js';
import { classifyChange } from './spec-diff.js';
import {
  awaitsCleanup,
  derivePhase,
  initialVmState,
  isSettled,
  isTerminal,
  poweredOffUpdate,
  runStarted,
  type Cause,
  type MigrationState,
  type PhaseInput,
  type VmState,
} from './state.js';
import { untilMatch } from './wait.js';
import { GuestAgentWatch } from './guest-agent-watch.js';
import { OneAtATime } from './one-at-a-time.js';
import { QemuExitWatch } from './qemu-exit-watch.js';
import { consoleSocketOf, prepareHostSide } from './host-side.js';
import type { VmManagerOptions } from './vm-manager-deps.js';
import { Phases } from './phases.js';
export type { DomainOps, Vmm, VmManagerOptions } from './vm-manager-deps.js';

export type SyncAction = 'Started' | 'Unchanged' | 'Updated';
/** How softReboot reached the guest. */
export type RebootMethod = 'GuestAgent' | 'Acpi';

const ACTIVE = new Set(['running', 'blocked', 'paused', 'shutdown', 'pmsuspended', 'crashed']);
/** How long libvirt gets to confirm a destroy with its Stopped event. */
const STOP_CONFIRM_MS = 15_000;
export const DEFAULT_GRACE_PERIOD_S = 30;
const KILL = Symbol('kill');
const KILLED: Cause = { reason: 'Killed', message: 'destroyed on request' };

export class VmManager {
  private readonly ops = new OneAtATime();
  private readonly refreshes = new OneAtATime();
  private readonly agent: GuestAgentWatch;
  private readonly qemuExit: QemuExitWatch;
  private readonly listeners = new Set<(s: VmState) => void>();
  private spec: VmSpec | undefined;
  /** The libvirt domain's uuid: the spec's system UUID once one was synced, the VM's uid before. */
  private domainUuid: string;
  private serial: SerialConsole | undefined;
  private input: PhaseInput = { domainState: 'absent', runReason: 'Booted' };
  /** While set, libvirt's view is in flux because of our own operation: refresh() waits for it to end. */
  private starting = false;
  /** After close() the domain is gone on purpose; the last state stays the final one. */
  private closing = false;
  private libvirtdGone = false; // and QEMU with it: no libvirt call can answer, and nothing is left to stop
  private state: VmState;
  private requestKill!: () => void;
  /** Why a kill destroys the VM: on request, or (a failure cause) because it failed. */
  private killCause: Cause & { failed?: boolean } = KILLED;
  /** Resolved by the first kill(): a shutdown waiting out its grace period destroys at once instead. */
  private readonly killRequested = new Promise<typeof KILL>((resolve) => (this.requestKill = () => resolve(KILL)));

  constructor(private readonly o: VmManagerOptions) {
    this.domainUuid = o.uid;
    this.state = initialVmState(o.consoleLog.paths.current);
    this.agent = new GuestAgentWatch({
      driver: o.driver,
      domainUuid: () => this.domainUuid,
      active: () => Boolean(this.spec?.guestAgent) && !this.closing,
      current: () => this.state,
      publish: (next) => this.publish(next),
      log: o.log,
    });
    this.qemuExit = new QemuExitWatch({ ...o.qemuProcess, onPoweredOff: () => this.poweredOff() });
  }

  get current(): VmState {
    return this.state;
  }

  get consoleSocketPath(): string {
    return consoleSocketOf(this.o.socketDir);
  }

  /** Calls `listener` after every state change until the returned function is called. */
  watch(listener: (s: VmState) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Feed from libvirt's event stream. */
  onLifecycle(e: LifecycleEvent): void {
    this.o.log.debug({ event: e }, 'libvirt lifecycle event');
    if (e.type === 'Suspended') this.input.pauseDetail = e.detail;
    if (e.type === 'Stopped' || e.type === 'Crashed') this.input.stopEvent = e;
    this.qemuExit.onLifecycle(e);
    void this.refresh();
  }

  /** Feed from libvirt's event stream: the guest agent connected or disconnected (or events may have been missed). */
  onAgentLifecycle(): void {
    void this.agent.refresh();
  }

  /** Parse, validate, then create, update in place, or refuse. See SyncVm in launcher.proto. */
  async sync(specJson: string): Promise<{ action: SyncAction; state: VmState }> {
    const spec = parseSpec(specJson, this.o.uid, this.o.vmm);
    return this.ops.run(async () => {
      // One run per launcher: restarting a stopped VM is the agent's decision (restartPolicy, back-off), with a new launcher.
      if (this.spec && isTerminal(this.state.phase))
        throw new PreconditionError(`the VM has stopped (${this.state.reason}); start a new launcher to run it again`);
      const domainState = await this.o.driver.state(this.domainUuid);
      if (ACTIVE.has(domainState) && this.spec) {
        const change = classifyChange(this.spec, spec);
        if (change.restart.length > 0) {
          throw new PreconditionError(`changing ${change.restart.join(', ')} needs a VM restart; stop the VM first`, change.restart);
        }
        if (change.live.length === 0) return { action: 'Unchanged', state: this.state };
        await this.o.cgroup.setLimits(cgroupLimits(spec, this.o.host.accelerator, 'running'));
        this.spec = spec;
        this.o.log.info({ fields: change.live }, 'applied spec change in place');
        return { action: 'Updated', state: this.state };
      }
      await this.start(spec);
      return { action: 'Started', state: this.state };
    });
  }

  /** ACPI power-off, destroy after the grace period, or at once when a Kill comes meanwhile. Resolves with the final state. */
  shutdown(gracePeriodS: number): Promise<VmState> {
    return this.ops.run(async () => {
      if (this.libvirtdGone || !ACTIVE.has(await this.o.driver.state(this.domainUuid))) return this.state;
      const stopped = this.untilTerminal(gracePeriodS * 1000, 'ACPI shutdown');
      if (!awaitsCleanup(this.state)) await this.o.driver.shutdownAcpi(this.domainUuid);
      try {
        const outcome = await Promise.race([stopped, this.killRequested]);
        if (outcome !== KILL) return outcome;
      } catch {
        this.o.log.info({ gracePeriodS }, 'guest still up after the grace period; destroying');
        return this.destroy({ reason: 'GracePeriodExpired', message: `the guest did not power off within ${gracePeriodS} s` });
      }
      this.o.log.info({ gracePeriodS }, 'killed during its grace period; destroying');
      return this.destroy(this.killCause);
    });
  }

  /**
   * Destroys the VM. Does not wait for a graceful shutdown under way: it cuts that short (a force delete).
   * `failure`: the VM is killed because it failed (a liveness probe), and its run ends Failed with that cause.
   */
  kill(failure?: Cause): Promise<VmState> {
    if (failure) this.killCause = { ...failure, failed: true };
    this.requestKill();
    return this.ops.run(async () => {
      if (this.libvirtdGone || !ACTIVE.has(await this.o.driver.state(this.domainUuid))) return this.state;
      return this.destroy(this.killCause);
    });
  }

  pause(): Promise<VmState> {
    return this.ops.run(async () => {
      const s = await this.requireActive('pause');
      if (s !== 'paused') await this.o.driver.suspend(this.domainUuid);
      return this.refresh();
    });
  }

  unpause(): Promise<VmState> {
    return this.ops.run(async () => {
      const s = await this.requireActive('unpause');
      if (s === 'paused') {
        this.input.runReason = 'Unpaused';
        await this.o.driver.resume(this.domainUuid);
      }
      return this.refresh();
    });
  }

  reset(): Promise<VmState> {
    return this.ops.run(async () => {
      await this.requireActive('reset');
      await this.o.driver.reset(this.domainUuid);
      this.input.runReason = 'Reset';
      return this.refresh();
    });
  }

  /** Attach to the serial console. FAILED_PRECONDITION when no QEMU runs. */
  attachConsole(onData: ConsoleListener, onEnd: () => void): { write(data: Buffer): void; detach(): void } {
    const serial = this.serial;
    if (!serial || serial.isClosed) throw new PreconditionError('the VM is not running; no console to attach to');
    const detach = serial.attach(onData, onEnd);
    return { write: (data) => serial.write(data), detach };
  }

  /** The guest agent's commands and answers; each call fails FAILED_PRECONDITION unless the spec has an agent and the VM runs. */
  readonly guest: GuestAgent = guestAgent(() => agentOf(this.spec, this.o.driver, this.domainUuid));

  /**
   * Reboots the guest as KubeVirt's soft reboot does: through the guest agent when it is connected, else by the
   * ACPI power button, after which libvirt resets the domain instead of stopping it. The QEMU process stays.
   */
  softReboot(): Promise<RebootMethod> {
    return this.ops.run(async () => {
      if ((await this.requireActive('reboot')) === 'paused') throw new PreconditionError('cannot reboot: the VM is paused');
      const method: RebootMethod | undefined = this.state.guestAgentConnected ? 'GuestAgent' : this.spec?.acpi ? 'Acpi' : undefined;
      if (!method) throw new PreconditionError('cannot reboot: the guest agent is not connected and the VM has no ACPI', ['acpi']);
      await this.o.driver.reboot(this.domainUuid, method === 'GuestAgent' ? 'agent' : 'acpi');
      this.o.log.info({ method }, 'guest reboot requested');
      return method;
    });
  }

  /** Grows a disk the VM uses in place under the running guest, never shrinks it (disk-resize.ts). Idempotent. */
  resizeDisk(path: string, sizeBytes: number): Promise<void> {
    return this.ops.run(async () => {
      // Off (its launcher still there): it opens the grown file at its next boot, so there is no QEMU to tell.
      const state = await this.o.driver.state(this.domainUuid);
      if (!ACTIVE.has(state) || state === 'crashed') return;
      const current = await this.o.driver.diskCapacity(this.domainUuid, path);
      checkDiskResize(this.spec, path, current, sizeBytes);
      await this.o.driver.blockResize(this.domainUuid, path, sizeBytes);
      this.o.log.info({ path, sizeBytes, was: current }, 'disk grown under the guest');
    });
  }

  /** libvirtd is gone, and QEMU with it: the state can no longer be asked for. */
  libvirtdExited(message: string): void {
    this.libvirtdGone = true;
    this.serial?.close();
    this.publish({ phase: 'Failed', reason: 'LibvirtdExited', message, domainState: 'absent', qemuPid: 0 });
  }

  /** Target of a migration: the host side of `spec` made ready for libvirt to bring the domain in. Only before any start. */
  prepareIncoming(spec: VmSpec): Promise<{ onHost: VmSpec; runtime: DomainRuntime }> {
    return this.ops.run(async () => {
      if (this.input.started) throw new PreconditionError('this launcher already ran its VM; an incoming migration needs a fresh one');
      return prepareHostSide(this.o, spec);
    });
  }

  /** Target of a migration: takes over the received, paused domain and runs it. Idempotent once it runs. */
  finishIncoming(spec: VmSpec): Promise<VmState> {
    return this.ops.run(async () => {
      if (!(this.input.started && this.spec)) await this.start(spec, true);
      return this.state;
    });
  }

  /** The migration's state, carried in VmState and so streamed to watchers. */
  setMigration(migration: MigrationState): void {
    this.publish({ migration });
  }

  /** Stops the VM if it still runs and removes what start() created. Runs after every other operation. */
  close(): Promise<void> {
    return this.ops.run(async () => {
      if (!this.libvirtdGone && ACTIVE.has(await this.o.driver.state(this.domainUuid)))
        await this.destroy({ reason: 'LauncherExiting', message: 'the launcher is exiting' });
      this.closing = true;
      // A refresh already past its closing check would read the domain undefined below.
      await this.refreshes.run(async () => {});
      this.agent.stop();
      this.qemuExit.stop();
      if (!this.libvirtdGone) await this.o.driver.undefine(this.domainUuid);
      this.serial?.close();
      this.o.consoleLog.close();
      if (this.spec) await this.o.vmm.removeDisks(this.spec);
    });
  }

  private async requireActive(what: string): Promise<string> {
    const s = await this.o.driver.state(this.domainUuid);
    if (!ACTIVE.has(s) || s === 'crashed') throw new PreconditionError(`cannot ${what}: the VM is ${s}`);
    return s;
  }

  /**
   * Define and boot: start paused, attach the console, then run the vCPUs, so no output is lost. `incoming`: the
   * domain is one a migration brought in, paused; it is only attached to and resumed.
   */
  private async start(spec: VmSpec, incoming = false): Promise<void> {
    const { driver, log } = this.o;
    const uid = domainUuidOf(spec);
    this.starting = true;
    this.input = { domainState: this.input.domainState, runReason: incoming ? 'Migrated' : 'Booted' };
    const phases = new Phases();
    try {
      if (!incoming) {
        const { onHost, runtime } = await phases.after('prepared', prepareHostSide(this.o, spec));
        const xml = this.o.vmm.buildDomainXml(onHost, runtime);
        // Left by a crashed launcher, or by a failed start here under another system UUID (libvirt refuses a second name).
        await driver.undefine(this.domainUuid);
        await driver.undefine(uid);
        await phases.after('defined', driver.define(xml));
      }
      this.domainUuid = uid;
      this.spec = spec;
      this.o.consoleLog.startRun();
      if (!incoming) await phases.after('startedPaused', driver.startPaused(uid));
      this.input.started = true;
      this.serial = await SerialConsole.connect(this.consoleSocketPath, [0, this.o.qemuUser.uid], this.o.consoleLog);
      this.state = runStarted(this.state, { domainUuid: uid, firmwareOnConsole: firmwareOnConsole(spec.firmware), atUnixMs: Date.now() });
      const stopWatchingOutput = this.serial.attach(
        () => {
          stopWatchingOutput();
          this.publish({ consoleOutputAtUnixMs: Date.now() });
        },
        () => {},
      );
      await this.o.cgroup.setCpuWeight(cpuWeightIn('running', spec));
      await phases.after('resumed', driver.resume(uid));
      log.info({ phases: phases.all, accelerator: this.o.host.accelerator, incoming }, 'VM started');
    } catch (err) {
      this.input.startFailure = { reason: 'StartFailed', message: (err as Error).message };
      // A received domain is the only copy of the VM: it stays, paused, for the agent to decide.
      if (!incoming && ACTIVE.has(await driver.state(uid).catch(() => 'absent'))) await driver.destroy(uid).catch(() => {});
      throw err;
    } finally {
      this.starting = false;
      await this.refresh();
    }
  }

  /** Destroys the domain and returns once libvirt confirms it stopped. */
  private async destroy(intent: Cause & { failed?: boolean }): Promise<VmState> {
    const stopped = this.untilTerminal(STOP_CONFIRM_MS, 'destroy');
    // Powered off, QEMU gone: libvirt's own clean-up is under way, which a destroy would only race.
    if (awaitsCleanup(this.state)) return stopped;
    this.input.destroyIntent = intent;
    await this.o.driver.destroy(this.domainUuid);
    return stopped;
  }

  /** Resolves with the state once the phase is terminal and libvirt has finished with the domain. */
  private untilTerminal(timeoutMs: number, what: string): Promise<VmState> {
    return untilMatch(this.state, (l) => this.watch(l), isSettled, timeoutMs, `waiting for the VM to stop (${what})`);
  }

  /** Re-reads libvirt's view and publishes what changed. Serialized; skipped while a start is under way. */
  private refresh(): Promise<VmState> {
    return this.refreshes.run(async () => {
      if (this.starting || this.closing) return this.state;
      try {
        this.input.domainState = await this.o.driver.state(this.domainUuid);
      } catch (err) {
        this.o.log.warn({ err }, 'reading the domain state failed');
        return this.state;
      }
      const derived = derivePhase({ ...this.input, guestPoweredOff: this.qemuExit.poweredOff });
      if (!derived) return this.state;
      const running = ACTIVE.has(this.input.domainState) && !this.qemuExit.poweredOff;
      const qemuPid = running ? this.state.qemuPid || (await this.o.libvirtd.qemuPid()) : 0;
      void this.qemuExit.track(qemuPid);
      // No QEMU, no agent: libvirt sends no agent event when the domain stops.
      this.publish({
        ...derived,
        domainState: this.input.domainState,
        qemuPid,
        ...(running ? {} : { guestAgentConnected: false, guestOsInfo: undefined }),
      });
      return this.state;
    });
  }

  /**
   * QEMU exited after the guest's Shutdown event: published at once, without the refresh's libvirt read, which waits
   * for libvirt's clean-up (it holds the domain throughout). Its later refresh, or the Stopped event's, brings the rest.
   */
  private poweredOff(): void {
    const update = poweredOffUpdate(this.input);
    if (update && !this.closing && !isTerminal(this.state.phase)) this.publish(update);
  }

  private publish(next: Partial<VmState>): void {
    const merged = { ...this.state, ...next };
    const changed = (Object.keys(next) as (keyof VmState)[]).some((k) => !isDeepStrictEqual(merged[k], this.state[k]));
    if (!changed) return;
    this.state = { ...merged, generation: this.state.generation + 1 };
    this.o.log.info(
      {
        phase: this.state.phase,
        reason: this.state.reason,
        domainState: this.state.domainState,
        guestAgentConnected: this.state.guestAgentConnected,
      },
      'VM state',
    );
    for (const l of this.listeners) l(this.state);
  }
}

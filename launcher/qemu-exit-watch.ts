// Whether the guest powered off, known as soon as QEMU's process exits after libvirt's Shutdown event rather than
// once libvirt has also cleaned up after it (its Stopped event, ~200 ms later on an idle host). Shutdown alone is not
// enough: after an ACPI reboot QEMU reports it and then resets, and a reboot must never look like a power-off.
//
// Node has no pidfd (nor any other way to wait for a process that is not its child: QEMU is libvirtd's), so the
// exit is found by polling /proc/<pid>: briefly, and only from a Shutdown event on, so a running VM costs nothing.
import { isProcessAlive, processStartTicks } from './state.js';
import type { LifecycleEvent } from './domain-driver.js';

/** Whether the process that had `startTicks` at `pid` still runs (state.ts's isProcessAlive by default). */
export type ProcessProbe = (pid: number, startTicks: number) => Promise<boolean>;

export interface QemuExitWatchOptions {
  /** Called once QEMU is seen gone after a Shutdown event; read `poweredOff` then. */
  onPoweredOff: () => void;
  isAlive?: ProcessProbe;
  /** Reads a process's start time; undefined when it is gone. */
  startTicksOf?: (pid: number) => Promise<number | undefined>;
  pollMs?: number;
  /** How long after a Shutdown event QEMU is watched; a QEMU still there by then did not power off (or libvirt's Stopped tells). */
  watchForMs?: number;
}

/** A process never has a negative start time: a QEMU gone before its start time was read is gone under any PID reuse. */
const GONE_WHEN_RECORDED = -1;
/** Below the 300 ms the status may take, above what reading /proc costs (~20 µs) on a node of a hundred VMs. */
const POLL_MS = 20;
/** libvirt kills QEMU right after its SHUTDOWN: the bound only ends the watch of a QEMU that stays (a reset), with room for a saturated host. */
const WATCH_FOR_MS = 10_000;

export class QemuExitWatch {
  private qemu: { pid: number; startTicks: number } | undefined;
  /** Bumped by every Shutdown event and by every event that says the guest runs again: ends older polls. */
  private round = 0;
  private exited = false;

  constructor(private readonly o: QemuExitWatchOptions) {}

  /** The guest's Shutdown event arrived, none since says it runs again, and its QEMU has exited. */
  get poweredOff(): boolean {
    return this.exited;
  }

  /** Records QEMU's PID and start time once libvirt named it, so a later process reusing the PID is not taken for it. */
  async track(pid: number): Promise<void> {
    if (pid === 0 || this.qemu?.pid === pid) return;
    const startTicks = await (this.o.startTicksOf ?? readStartTicks)(pid);
    this.qemu = { pid, startTicks: startTicks ?? GONE_WHEN_RECORDED };
  }

  /** Feed from libvirt's event stream: watches QEMU from a Shutdown event; forgets it when the guest runs again. */
  onLifecycle(e: LifecycleEvent): void {
    if (e.type === 'Started' || e.type === 'Resumed') {
      this.round++;
      this.exited = false;
    } else if (e.type === 'Shutdown') void this.watch(++this.round);
  }

  /** Ends the poll under way (the launcher is closing). */
  stop(): void {
    this.round++;
  }

  private async watch(round: number): Promise<void> {
    const isAlive = this.o.isAlive ?? isProcessAlive;
    const deadline = Date.now() + (this.o.watchForMs ?? WATCH_FOR_MS);
    const qemu = this.qemu;
    // No PID: libvirt never named a QEMU, so there is none to prove gone; libvirt's Stopped event still decides.
    if (!qemu) return;
    while (round === this.round && Date.now() < deadline) {
      if (!(await isAlive(qemu.pid, qemu.startTicks))) {
        if (round !== this.round) return;
        this.exited = true;
        return this.o.onPoweredOff();
      }
      await new Promise((resolve) => setTimeout(resolve, this.o.pollMs ?? POLL_MS));
    }
  }
}

const readStartTicks = (pid: number): Promise<number | undefined> => processStartTicks(pid).catch(() => undefined);

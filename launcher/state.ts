// The VM's phase and reason, derived in one place from libvirt's domain state,
// the lifecycle events libvirt sent and what the launcher itself asked for;
// and the launcher's state file.
import { readFile, rename, writeFile } from 'node:fs/promises';
import type { DomainStateName, LifecycleEvent } from './domain-driver.js';
import type { JobStats } from './job-stats.js';

export type Phase = 'Pending' | 'Running' | 'Paused' | 'Succeeded' | 'Failed';

export interface VmState {
  phase: Phase;
  /** CamelCase, machine-readable. */
  reason: string;
  message: string;
  domainState: DomainStateName;
  /** Host PID; 0 when QEMU is not running. */
  qemuPid: number;
  startedAtUnixMs: number;
  consoleLogPath: string;
  domainUuid: string;
  generation: number;
  /** First serial console output of the current run, Unix ms; 0 until the guest (or its firmware) wrote any. */
  consoleOutputAtUnixMs: number;
  /**
   * The VM's firmware writes to the serial console itself (OVMF; SeaBIOS with useSerial), so console output does not
   * say the guest OS runs. Set from the spec of the current run.
   */
  firmwareOnConsole: boolean;
  /** The guest agent has its channel open. */
  guestAgentConnected: boolean;
  /** When the guest agent first opened its channel in the current run, Unix ms; 0 until then (it stays set after a disconnect). */
  guestAgentConnectedAtUnixMs: number;
  /** What the guest agent said about the guest OS since it last connected. */
  guestOsInfo?: GuestOsInfo;
  /** The live migration this launcher takes part in, once one was asked for. */
  migration?: MigrationState;
}

/**
 * A live migration as one launcher sees it. Source: Running → Migrated (the commit: the source domain is gone) |
 * Failed | Aborted, the VM running on here in both. Target: Prepared → ReceivedPaused → Resumed.
 */
export interface MigrationState {
  uid: string;
  role: 'Source' | 'Target';
  phase: 'Prepared' | 'Running' | 'Migrated' | 'Failed' | 'Aborted' | 'ReceivedPaused' | 'Resumed';
  /** CamelCase, e.g. MigrationProgressTimeout; empty while nothing went wrong. */
  reason: string;
  message: string;
  /** libvirt's job figures: the latest while running (at most one a second), the final ones once Migrated. */
  stats?: JobStats;
}

/** guest-get-osinfo's answer, camelCased; fields the guest does not know are absent. */
export interface GuestOsInfo {
  name?: string;
  id?: string;
  prettyName?: string;
  version?: string;
  versionId?: string;
  kernelRelease?: string;
  kernelVersion?: string;
  machine?: string;
}

/** A reason the launcher knows better than libvirt, with a human-readable message. */
export interface Cause {
  reason: string;
  message: string;
}

export interface PhaseInput {
  domainState: DomainStateName;
  /** Set once the launcher started the domain: an absent domain is then one removed after its run, not one yet to be created. */
  started?: boolean;
  /** Why the vCPUs run, as the launcher last made them: Booted, Unpaused or Reset. */
  runReason: string;
  /** Detail of the last Suspended event (libvirt pauses by itself on I/O errors). */
  pauseDetail?: string;
  /** The Stopped or Crashed event that ended the current run, once libvirt sent it. */
  stopEvent?: LifecycleEvent;
  /** Set when the launcher destroyed the domain itself (Kill, grace period over); `failed` when it was killed for failing. */
  destroyIntent?: Cause & { failed?: boolean };
  /** Set when the last start failed. */
  startFailure?: Cause;
  /**
   * The guest powered off: libvirt's Shutdown event arrived (none since says it runs again) and QEMU's process has
   * exited since (qemu-exit-watch.ts). Shutdown alone is no proof: after an ACPI reboot QEMU reports it and resets.
   */
  guestPoweredOff?: boolean;
}

const POWERED_OFF = 'the guest powered off';
type Rule = [(i: PhaseInput) => boolean, Phase, (i: PhaseInput) => Cause];

const camel = (s: string): string => s.replace(/(?:^|[\s/_-]+)(\w)/g, (_, c: string) => c.toUpperCase());
const off = (i: PhaseInput): boolean => i.domainState === 'absent' || i.domainState === 'shutoff';
const stoppedBy = (detail: string) => (i: PhaseInput) => off(i) && i.stopEvent?.type === 'Stopped' && i.stopEvent.detail === detail;
const causeOf = ({ reason, message }: Cause): Cause => ({ reason, message });
const because =
  (reason: string, message = ''): (() => Cause) =>
  () => ({ reason, message });

// First match wins. A shut-off (or, after its run, removed) domain whose
// Stopped event has not arrived yet matches nothing: the caller keeps the
// previous state rather than guess.
const RULES: Rule[] = [
  [(i) => off(i) && i.startFailure !== undefined, 'Failed', (i) => i.startFailure!],
  [(i) => i.domainState === 'absent' && !i.started, 'Pending', because('NotStarted')],
  // Ahead of libvirt's clean-up (its Stopped event), which ends ~200 ms after QEMU exited on an idle host. Never
  // while libvirt says the vCPUs run or are paused, nor once the launcher destroyed the domain (the kill-intent rules).
  [
    (i) => i.guestPoweredOff === true && !i.destroyIntent && (off(i) || i.domainState === 'shutdown'),
    'Succeeded',
    because('GuestShutdown', POWERED_OFF),
  ],
  [(i) => i.domainState === 'running' || i.domainState === 'blocked', 'Running', (i) => ({ reason: i.runReason, message: '' })],
  [(i) => i.domainState === 'shutdown', 'Running', because('ShuttingDown', 'the guest is powering off')],
  [
    (i) => i.domainState === 'paused',
    'Paused',
    (i) => ({ reason: i.pauseDetail && i.pauseDetail !== 'Paused' ? camel(i.pauseDetail) : 'Paused', message: '' }),
  ],
  [(i) => i.domainState === 'pmsuspended', 'Paused', because('GuestSuspended', 'the guest suspended itself')],
  [(i) => stoppedBy('Destroyed')(i) && i.destroyIntent?.failed === true, 'Failed', (i) => causeOf(i.destroyIntent!)],
  [(i) => stoppedBy('Destroyed')(i) && i.destroyIntent !== undefined, 'Succeeded', (i) => causeOf(i.destroyIntent!)],
  [stoppedBy('Shutdown'), 'Succeeded', because('GuestShutdown', POWERED_OFF)],
  [stoppedBy('Destroyed'), 'Succeeded', because('Destroyed')],
  [stoppedBy('Crashed'), 'Failed', because('Crashed', 'the guest crashed')],
  [stoppedBy('Failed'), 'Failed', because('QemuFailed', 'QEMU exited unexpectedly')],
  [stoppedBy('Migrated'), 'Succeeded', because('Migrated', 'the VM moved to another node')],
  [(i) => off(i) && i.stopEvent !== undefined, 'Failed', (i) => ({ reason: `Stopped${camel(i.stopEvent!.detail)}`, message: '' })],
  [(i) => i.domainState === 'crashed', 'Failed', because('GuestPanicked', 'the guest kernel panicked')],
];

/** Phase, reason and message for the inputs, or undefined while they do not determine one yet. */
export function derivePhase(input: PhaseInput): ({ phase: Phase } & Cause) | undefined {
  for (const [matches, phase, cause] of RULES) if (matches(input)) return { phase, ...cause(input) };
  return undefined;
}

export const isTerminal = (phase: Phase): boolean => phase === 'Succeeded' || phase === 'Failed';

/**
 * The state once QEMU exited after the guest's Shutdown event, before libvirt answers again: libvirt set the domain
 * 'shutdown' as it sent that event, and keeps it so until its clean-up is done. Undefined when the rules say
 * otherwise (the launcher destroyed the domain).
 */
export function poweredOffUpdate(input: PhaseInput): Partial<VmState> | undefined {
  const domainState = off(input) ? input.domainState : 'shutdown';
  const derived = derivePhase({ ...input, domainState, guestPoweredOff: true });
  if (derived?.reason !== 'GuestShutdown') return undefined;
  return { ...derived, domainState, qemuPid: 0, guestAgentConnected: false, guestOsInfo: undefined };
}

/**
 * The guest powered off and its QEMU exited, but libvirt is still cleaning up after it (the domain is 'shutdown'
 * until then): the status went first; stopping, undefining or removing the domain waits for the rest.
 */
export const awaitsCleanup = (s: Pick<VmState, 'phase' | 'domainState'>): boolean => isTerminal(s.phase) && s.domainState === 'shutdown';

/** The run is over and libvirt is done with it. */
export const isSettled = (s: Pick<VmState, 'phase' | 'domainState'>): boolean => isTerminal(s.phase) && !awaitsCleanup(s);

/** A launcher's state before its VM ever ran. */
export function initialVmState(consoleLogPath: string): VmState {
  return {
    phase: 'Pending',
    reason: 'NotStarted',
    message: '',
    domainState: 'absent',
    qemuPid: 0,
    startedAtUnixMs: 0,
    consoleLogPath,
    domainUuid: '',
    generation: 1,
    consoleOutputAtUnixMs: 0,
    firmwareOnConsole: false,
    guestAgentConnected: false,
    guestAgentConnectedAtUnixMs: 0,
  };
}

/** The state as a run of the VM starts: what the guest did in an earlier run is forgotten. */
export function runStarted(state: VmState, run: { domainUuid: string; firmwareOnConsole: boolean; atUnixMs: number }): VmState {
  const next: VmState = {
    ...state,
    startedAtUnixMs: run.atUnixMs,
    domainUuid: run.domainUuid,
    firmwareOnConsole: run.firmwareOnConsole,
    qemuPid: 0,
    consoleOutputAtUnixMs: 0,
    guestAgentConnected: false,
    guestAgentConnectedAtUnixMs: 0,
  };
  delete next.guestOsInfo;
  return next;
}

export const STATE_FILE_NAME = 'launcher.json';

/** What the agent finds in <run-dir>/launcher.json. */
export interface StateFile {
  uid: string;
  pid: number;
  /** /proc/<pid>/stat starttime: tells this launcher from a later process reusing its PID. */
  pidStartTicks: number;
  socket: string;
  startedAtUnixMs: number;
  /** Set when the launcher exits cleanly: the VM's final phase, reason and message. */
  exit?: { phase: Phase; atUnixMs: number } & Cause;
}

/** Fields 3.. of /proc/<pid>/stat; comm (field 2) may hold spaces and parentheses, so split after the last ')'. */
async function statFields(pid: number): Promise<string[]> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat). */
export async function processStartTicks(pid: number): Promise<number> {
  return Number((await statFields(pid))[19]);
}

/** Whether the process that had `startTicks` at `pid` still runs: same PID, same start time, not a zombie. */
export async function isProcessAlive(pid: number, startTicks: number): Promise<boolean> {
  try {
    const fields = await statFields(pid);
    return Number(fields[19]) === startTicks && fields[0] !== 'Z' && fields[0] !== 'X';
  } catch {
    return false;
  }
}

/** Whether the launcher recorded in `state` still runs. */
export const isLauncherAlive = (state: StateFile): Promise<boolean> => isProcessAlive(state.pid, state.pidStartTicks);

export async function writeStateFile(file: string, state: StateFile): Promise<void> {
  // Write-then-rename: a reader never sees half a file.
  const tmp = `${file}.tmp`;
  await writeFile(tmp, JSON.stringify(state, null, 2) + '\n', { mode: 0o600 });
  await rename(tmp, file);
}

export async function readStateFile(file: string): Promise<StateFile> {
  return JSON.parse(await readFile(file, 'utf8')) as StateFile;
}

// TypeScript shapes of launcher.proto's messages as load.ts delivers them
// (WIRE_OPTIONS: camelCase, enums as names, int64 as number), and the
// mapping between the wire VmState and the launcher's own.
import type { DomainStateName } from '../domain-driver.js';
import type { IncomingPaths } from '../../vmm/domain/migration-xml.js';
import type { JobStats } from '../job-stats.js';
import type { GuestOsInfo, MigrationState, Phase, VmState } from '../state.js';
import type { RebootMethod, SyncAction } from '../vm-manager.js';

export type WirePhase = `VM_PHASE_${'UNSPECIFIED' | 'PENDING' | 'RUNNING' | 'PAUSED' | 'SUCCEEDED' | 'FAILED'}`;
export type WireDomainState = `DOMAIN_STATE_${Uppercase<DomainStateName> | 'UNSPECIFIED'}`;
export type WireSyncAction = `SYNC_ACTION_${Uppercase<SyncAction> | 'UNSPECIFIED'}`;

/** VmState on the wire: the same fields, with the enums as proto-loader names them; an unset message arrives as null. */
export type WireVmState = Omit<VmState, 'phase' | 'domainState' | 'guestOsInfo' | 'migration'> & {
  phase: WirePhase;
  domainState: WireDomainState;
  guestOsInfo?: GuestOsInfo | null;
  migration?: WireMigrationState | null;
};

const snake = (s: string): string => s.replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase();
const camelCase = (s: string): string => s.toLowerCase().replace(/(?:^|_)(\w)/g, (_, c: string) => c.toUpperCase());

export type WireMigrationState = Omit<MigrationState, 'role' | 'phase' | 'stats'> & {
  role: `MIGRATION_ROLE_${string}`;
  phase: `MIGRATION_PHASE_${string}`;
  stats?: JobStats | null;
};

export const toWireMigration = (m: MigrationState): WireMigrationState => ({
  ...m,
  role: `MIGRATION_ROLE_${snake(m.role)}`,
  phase: `MIGRATION_PHASE_${snake(m.phase)}`,
});

export function fromWireMigration(w: WireMigrationState): MigrationState {
  const { stats, ...rest } = w;
  return {
    ...rest,
    role: camelCase(w.role.replace('MIGRATION_ROLE_', '')) as MigrationState['role'],
    phase: camelCase(w.phase.replace('MIGRATION_PHASE_', '')) as MigrationState['phase'],
    ...(stats ? { stats } : {}),
  };
}

/** IncomingPaths on the wire: proto maps arrive as objects, absent ones empty. */
export type WireIncomingPaths = IncomingPaths;

export interface StartMigrationRequest {
  migrationUid: string;
  destUri: string;
  memoryUri: string;
  disksUri: string;
  migrateDisks: string[];
  targetPaths: WireIncomingPaths | null;
  bandwidthMibPerS: number;
  maxDowntimeMs: number;
  autoConverge: boolean;
  progressTimeoutS: number;
  completionTimeoutS: number;
  allowWorkloadDisruption: boolean;
}
export interface MigrationResponse {
  migration: WireMigrationState;
}
export interface MigrationUidRequest {
  migrationUid: string;
}
export interface PrepareIncomingRequest {
  migrationUid: string;
  specJson: string;
}
export interface PrepareIncomingResponse {
  paths: WireIncomingPaths;
}

export interface InfoResponse {
  uid: string;
  launcherPid: number;
  runDir: string;
  consoleLogPath: string;
  previousConsoleLogPath: string;
  libvirtVersion: string;
  accelerator: string;
  cgroup: string;
  memoryLimitBytes: number;
}
export interface SyncVmRequest {
  specJson: string;
}
export interface SyncVmResponse {
  action: WireSyncAction;
  state: WireVmState;
}
export interface ShutdownRequest {
  gracePeriodS: number;
}
export interface KillRequest {
  failureReason: string;
  failureMessage: string;
}
/** Shutdown, Kill, Pause, Unpause, Reset, GetState and WatchEvents all answer with a state. */
export interface StateResponse {
  state: WireVmState;
}
export interface ConsoleMessage {
  data: Buffer;
}
export interface GuestExecRequest {
  path: string;
  args: string[];
  stdin: Buffer;
  timeoutS: number;
}
export interface GuestExecResponse {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}
export interface ListGuestUsersResponse {
  users: Array<{ name: string; domain: string; loginTimeS: number }>;
}
export interface ListGuestFilesystemsResponse {
  filesystems: Array<{
    diskName: string;
    mountPoint: string;
    type: string;
    usedBytes: number;
    totalBytes: number;
    disks: Array<{ busType: string; serial: string }>;
  }>;
}
export interface GetGuestAgentInfoResponse {
  agentVersion: string;
  supportedCommands: Array<{ name: string; enabled: boolean }>;
  hostname: string;
  timezone: string;
}
export interface SoftRebootResponse {
  method: RebootMethod;
}
export interface ResizeDiskRequest {
  path: string;
  sizeBytes: number;
}
export type Empty = Record<string, never>;

export const toWireState = ({ migration, ...s }: VmState): WireVmState => ({
  ...s,
  phase: `VM_PHASE_${s.phase.toUpperCase()}` as WirePhase,
  domainState: `DOMAIN_STATE_${s.domainState.toUpperCase()}` as WireDomainState,
  ...(migration ? { migration: toWireMigration(migration) } : {}),
});

const PHASES: Record<WirePhase, Phase | undefined> = {
  VM_PHASE_UNSPECIFIED: undefined,
  VM_PHASE_PENDING: 'Pending',
  VM_PHASE_RUNNING: 'Running',
  VM_PHASE_PAUSED: 'Paused',
  VM_PHASE_SUCCEEDED: 'Succeeded',
  VM_PHASE_FAILED: 'Failed',
};

export function fromWireState(w: WireVmState): VmState {
  const phase = PHASES[w.phase];
  if (!phase) throw new Error(`launcher sent a state without a phase (${w.phase})`);
  const { guestOsInfo, migration, ...rest } = w;
  // proto3 strings default to '': the guest did not say.
  const osInfo = guestOsInfo ? Object.fromEntries(Object.entries(guestOsInfo).filter(([, v]) => v !== '')) : undefined;
  return {
    ...rest,
    phase,
    domainState: w.domainState.replace('DOMAIN_STATE_', '').toLowerCase() as DomainStateName,
    ...(osInfo ? { guestOsInfo: osInfo } : {}),
    ...(migration ? { migration: fromWireMigration(migration) } : {}),
  };
}

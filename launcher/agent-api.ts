// The launcher as the node agent sees it, and the only module of launcher/
// that provider/ imports (a lint rule holds it to that): spawning and
// connecting to a launcher, the record a launcher leaves in its directory,
// the files the agent reads of a VM (console logs, cgroup usage, its VNC socket), and the
// sizing facts the scheduler is told about.
export { DEFAULTS as LAUNCHER_DEFAULTS, socketPathTooLong } from './args.js';
export { Cgroup, DEFAULT_CGROUP_ROOT, detectLayout } from './cgroup.js';
export { LauncherClient, LauncherGoneError, launcherGone, type LauncherGone } from './client.js';
export { consoleLogPaths } from './console/log-file.js';
export { InvalidArgumentError, PreconditionError, UnavailableError } from './errors.js';
export type { JobStats } from './job-stats.js';
export type { StartMigration } from './migration-source.js';
export { MIGRATION_SOCKET_DIR } from './migration-target.js';
export type { IncomingPaths } from '../vmm/domain/migration-xml.js';
export { connectVncSocket } from './qemu-sockets.js';
export type { GuestAgentInfo, GuestFilesystem, GuestUser } from './guest-queries.js';
export { lookupUser, QEMU_USER } from './libvirtd.js';
export { FIXED_OVERHEAD_MIB, GRAPHICS_OVERHEAD_MIB, memoryLimitMiB, PER_VCPU_OVERHEAD_MIB, TCG_OVERHEAD_MIB } from './limits.js';
export { spawnLauncher } from './spawn.js';
export { isLauncherAlive, processStartTicks, readStateFile, STATE_FILE_NAME, type GuestOsInfo, type MigrationState } from './state.js';
import type { VmState as LauncherVmState } from './state.js';
/** A VM's state as the agent acts on it: phases and reasons; libvirt's domain state stays the launcher's (logs only). */
export type VmState = Omit<LauncherVmState, 'domainState'>;
export { CgroupNotFoundError, readVmUsage, type VmUsage } from './usage.js';
export { withDeadline } from './wait.js';

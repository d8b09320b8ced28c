// What VmManager needs from the rest of the launcher and from vmm/, bound to this host and run dir by main.ts;
// tests pass small fakes.
import type { Logger } from 'pino';
import type { DomainRuntime, PreparedDisk } from '../vmm/domain/runtime.js';
import type { SpecError } from '../vmm/errors.js';
import type { HostCaps } from '../vmm/probe/virtualization.js';
import type { VmSpec } from '../vmm/spec.js';
import type { Cgroup } from './cgroup.js';
import type { ConsoleLog } from './console/log-file.js';
import type { DomainDriver } from './domain-driver.js';
import type { PrivateLibvirtd } from './libvirtd.js';
import type { QemuExitWatchOptions } from './qemu-exit-watch.js';

/** What the launcher needs from vmm/, bound to this host and run dir by main.ts. */
export interface Vmm {
  validate(spec: VmSpec): SpecError | null;
  /** The spec with every host file it names checked against the node's policy and resolved; SpecError otherwise. */
  resolveHostFiles(spec: VmSpec): Promise<VmSpec>;
  prepareDisks(spec: VmSpec): Promise<Record<string, PreparedDisk>>;
  removeDisks(spec: VmSpec): Promise<void>;
  buildDomainXml(spec: VmSpec, runtime: DomainRuntime): string;
}

/** The domain calls the manager makes; libvirt's events reach it through onLifecycle. */
export type DomainOps = Pick<
  DomainDriver,
  | 'state'
  | 'define'
  | 'startPaused'
  | 'suspend'
  | 'resume'
  | 'reset'
  | 'reboot'
  | 'shutdownAcpi'
  | 'destroy'
  | 'undefine'
  | 'agentCommand'
  | 'agentConnected'
  | 'diskCapacity'
  | 'blockResize'
>;

export interface VmManagerOptions {
  uid: string;
  /** Sockets QEMU binds live here; owned by the QEMU user. */
  socketDir: string;
  emulatorPath: string;
  host: HostCaps;
  libvirtd: Pick<PrivateLibvirtd, 'qemuPid'>;
  driver: DomainOps;
  cgroup: Pick<Cgroup, 'setLimits' | 'setCpuWeight'>;
  consoleLog: ConsoleLog;
  qemuUser: { uid: number; gid: number };
  vmm: Vmm;
  log: Logger;
  /** How QEMU's exit after a power-off is seen; /proc by default (tests pass fakes). */
  qemuProcess?: Pick<QemuExitWatchOptions, 'isAlive' | 'startTicksOf'>;
}

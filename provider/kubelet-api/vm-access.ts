// What the kubelet API routes need from the running VMs, and nothing more.
// The node agent implements it over its launcher registry; route tests use
// small fakes.
import type { Duplex } from 'node:stream';

export interface PodRef {
  namespace: string;
  name: string;
  /** Container name from the URL; the VM is the pod's one container. */
  container: string;
}

export interface ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
}

export interface VmCpuMemory {
  namespace: string;
  pod: string;
  podUID: string;
  container: string;
  startTime: Date;
  /** Cumulative CPU time of the VM's cgroup (launcher, libvirt daemon, QEMU). */
  cpuUsageCoreNanoSeconds: number;
  memoryWorkingSetBytes: number;
  memoryRSSBytes: number;
}

export interface VmAccess {
  /**
   * A duplex on the guest's serial console: reads are console output, writes
   * are console input. Ending it detaches; the VM keeps running.
   * Throws NotFoundError for an unknown pod/container.
   */
  attachConsole(ref: PodRef): Promise<Duplex>;
  /**
   * Runs a command through the QEMU guest agent. Throws a FailedPreconditionError-style
   * error (kind 'NoGuestAgent') with a clear message when the guest has no agent.
   */
  guestExec(ref: PodRef, command: string[], stdin?: Buffer): Promise<ExecResult>;
  /** Path of the console log in CRI format; `previous` for the prior run. Throws NotFoundError. */
  consoleLogPath(ref: PodRef, previous: boolean): Promise<string>;
  /** Resource usage of every VM on the node. */
  listVmUsage(): Promise<VmCpuMemory[]>;
}

// What the kubelet API routes need from the running VMs, and nothing more.
// The node agent implements it over its launcher registry; route tests use
// small fakes.
import type { Socket as UdpSocket } from 'node:dgram';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { GuestAgentInfo, GuestFilesystem, GuestOsInfo, GuestUser, VmUsage } from '../../launcher/agent-api.js';

export type { GuestAgentInfo, GuestFilesystem, GuestOsInfo, GuestUser };

/** Everything the guest agent reports: asked now, but the OS as it was reported when the agent connected. */
export interface GuestInfo {
  agent: GuestAgentInfo;
  os?: GuestOsInfo;
  users: GuestUser[];
  filesystems: GuestFilesystem[];
}

export interface PodRef {
  namespace: string;
  name: string;
  /** Container name from the URL; the VM is the pod's one container. */
  container: string;
}

/** A pod by name, for the endpoints that reach the pod rather than a container (port-forward). */
export type PodName = Omit<PodRef, 'container'>;

/** What port-forward reaches of one pod. */
export interface PodPorts {
  uid: string;
  /**
   * A TCP connection from the node to `port` at the pod's own address: the
   * guest's (bridge), or the pod's, whose listed ports masquerade forwards to
   * the guest. Opened with allowHalfOpen. Rejects with an Error saying why
   * not (the VM is not running, the pod has no address, the guest refused).
   */
  connect(port: number): Promise<Socket>;
  /** A UDP socket connected from the node to `port` at the same address; rejects as connect does. */
  connectUdp(port: number): Promise<UdpSocket>;
}

/** A VM's VNC display. */
export interface VncDisplay {
  uid: string;
  /**
   * A new connection to the display's VNC server (RFB from its first byte),
   * opened with allowHalfOpen. Rejects with a BadRequestError when the VM has
   * no display.
   */
  connect(): Promise<Socket>;
}

export interface ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number;
}

/** guestExec on a VM whose guest has no QEMU guest agent channel (or no agent answering on it). */
export class NoGuestAgentError extends Error {
  readonly kind = 'NoGuestAgent';
}

/** One VM's usage: its pod, and the figures of its cgroup (launcher, libvirt daemon, QEMU). */
export interface VmCpuMemory extends VmUsage {
  namespace: string;
  pod: string;
  podUID: string;
  container: string;
  /** When the VM started. */
  startTime: Date;
}

/** A VMI's launcher pod on this node. */
export interface VmiPodRef extends PodRef {
  /** The VMI's UID (the pod's controller reference). */
  vmiUid: string;
}

export interface VmAccess {
  /**
   * The launcher pod on this node of VMI namespace/name: a pod controlled by
   * a VirtualMachineInstance of that name. Throws NotFoundError when this
   * node runs none.
   */
  vmiPod(namespace: string, name: string): VmiPodRef;
  /**
   * What the guest agent reports now. Throws ConflictError when the VM has no
   * guest agent or is not running, UnavailableError when the agent does not
   * answer, NotFoundError for an unknown pod.
   */
  guestUsers(ref: PodRef): Promise<GuestUser[]>;
  guestFilesystems(ref: PodRef): Promise<GuestFilesystem[]>;
  guestInfo(ref: PodRef): Promise<GuestInfo>;
  /** Reboots the guest (launcher SoftReboot). ConflictError when it cannot (paused, no agent and no ACPI). */
  softReboot(ref: PodRef): Promise<void>;
  /**
   * A duplex on the guest's serial console: reads are console output from now
   * on, writes are console input. Several may be open at once. end() detaches
   * after the pending input is written, destroy() detaches at once; either way
   * the readable side then ends and the VM keeps running. The readable side
   * also ends when the console goes away (the VM stopped).
   * Throws NotFoundError for an unknown pod/container.
   */
  attachConsole(ref: PodRef): Promise<Duplex>;
  /**
   * Runs a command (argv, no shell) through the QEMU guest agent and returns
   * once it exits. Throws NoGuestAgentError, with a message saying what is
   * missing, when the guest has no agent; NotFoundError for an unknown
   * pod/container.
   */
  guestExec(ref: PodRef, command: string[]): Promise<ExecResult>;
  /**
   * Path of the console log in CRI format (launcher/console/log-file.ts);
   * `previous` for the prior run. The file's older segment, if any, is
   * `<path>.1`. Throws NotFoundError for an unknown pod/container.
   */
  consoleLogPath(ref: PodRef, previous: boolean): Promise<string>;
  /** The pod's ports, found when asked; connections open later. Throws NotFoundError for an unknown pod. */
  podPorts(ref: PodName): Promise<PodPorts>;
  /**
   * The VNC display of a running VM. Throws NotFoundError for an unknown pod,
   * BadRequestError when its VM is not running.
   */
  vncDisplay(ref: PodName): Promise<VncDisplay>;
  /**
   * Resource usage of every running VM on the node. A VM whose cgroup vanished
   * between listing and reading (it just stopped) is left out, not an error.
   */
  listVmUsage(): Promise<VmCpuMemory[]>;
}

// A private libvirtd per VM, in its own mount, PID, UTS and IPC namespaces,
// and in the VM's network namespace when it has one.
//
// Process tree (host PIDs):
//   launcher ─ unshare (PR_SET_PDEATHSIG=SIGKILL via setpriv)
//                └─ sh: PID 1 of the new PID namespace (unshare --kill-child)
//                     ├─ libvirtd
//                     └─ qemu-system-* (daemonized by libvirt, reparented to PID 1)
// When the launcher dies, even by SIGKILL, the kernel kills unshare; unshare's
// death kills PID 1; PID 1 dying makes the kernel kill everything else in the
// namespace, QEMU included. sh as PID 1 also reaps QEMU once it exits (libvirtd
// does not reap processes it did not fork) and exits when libvirtd does.
//
// Private directories are bind-mounted over /run/libvirt, /var/lib/libvirt,
// /var/log/libvirt and /etc/libvirt, so domains, sockets and configs never
// meet the host's or another launcher's, inside a new root that holds only
// what libvirtd and QEMU need (filesystem-view.ts). /var/cache/libvirt is the
// node's own libvirt cache directory, shared by its launchers: the QEMU
// capabilities cache turns a ~4.7 s probe into nothing after the first VM.
// vkvm makes it (root, 0700: libvirt hands its qemu/ subdirectory to the
// VM's QEMU uid, and no QEMU may write what another VM's libvirtd reads); a
// host's own /var/cache/libvirt is neither needed nor touched, so a host
// where no system libvirtd ever ran works the same.
// The daemon loads the qemu driver alone (libvirt-drivers.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { openSync, closeSync } from 'node:fs';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { constants } from 'node:os';
import path from 'node:path';
import { Hypervisor } from '@unraid/libvirt';
import { viewArgs, type ViewEntry } from './filesystem-view.js';
import { findDriverDir, qemuOnlyDriverDir } from './libvirt-drivers.js';
import { MOUNTS, NAMESPACE_INIT_SCRIPT } from './namespace-init.js';
import { waitForUnixSocket, withDeadline } from './wait.js';
import type { Phases } from './phases.js';

export const DEFAULT_LIBVIRTD = '/usr/sbin/libvirtd';
/** The unprivileged account QEMU runs as (Debian's libvirt packaging). */
export const QEMU_USER = 'libvirt-qemu';

// Sockets are root-only: only the launcher talks to this daemon. libvirt's
// own logs go to the private log dir. host_uuid is the daemon's own: libvirt
// refuses to migrate between two daemons with the same host UUID (or
// hostname, set in the UTS namespace), and every launcher of a host would
// otherwise read the same one from SMBIOS.
export function libvirtdConf(hostUuid: string): string {
  return `# written by the vkvm launcher
unix_sock_rw_perms = "0600"
unix_sock_ro_perms = "0600"
unix_sock_admin_perms = "0600"
auth_unix_rw = "none"
auth_unix_ro = "none"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
host_uuid = "${hostUuid}"
`;
}

// QEMU never runs as root, and each VM's QEMU as its own uid (numeric: the
// account exists nowhere else). dynamic_ownership=0: libvirt would otherwise
// chown every file QEMU opens to that uid, shared ones included (a base image,
// a kernel taken out of an image), handing one VM write access to what others
// boot from; the launcher gives QEMU its own files itself (0600/0700), and
// shared read-only files stay root's and world-readable. stdio_handler=file:
// QEMU's stderr goes straight to /var/log/libvirt/qemu/<name>.log, so no
// virtlogd is needed. The launcher owns the cgroup, so libvirt must not create
// its own (it would move QEMU out of ours). No SELinux/AppArmor driver; DAC
// (the user/group below) still applies, and QEMU's seccomp sandbox stays on.
function qemuConf(user: QemuIdentity): string {
  return `# written by the vkvm launcher
user = "+${user.uid}"
group = "+${user.gid}"
dynamic_ownership = 0
stdio_handler = "file"
cgroup_controllers = [ ]
security_driver = "none"
seccomp_sandbox = 1
`;
}

/** The uid and gid a VM's QEMU runs as. */
export interface QemuIdentity {
  uid: number;
  gid: number;
}

export interface LibvirtdOptions {
  /** Private state lives in <dir>/{run,lib,log,etc}; daemon output in <dir>/libvirtd.out. */
  dir: string;
  /** The node's libvirt cache (QEMU capabilities), shared by its launchers; made root-only if missing. */
  cacheDir: string;
  libvirtdPath?: string;
  /** Network namespace for libvirtd and QEMU: the VM's taps live there. */
  netns?: string;
  /** Who QEMU runs as. */
  qemu: QemuIdentity;
  /** What libvirtd and QEMU see of the host (filesystem-view.ts), which must hold libvirtd itself. */
  view: ViewEntry[];
  startTimeoutMs?: number;
  /** Where the start's steps are marked (main.ts logs them). */
  phases?: Phases;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface PrivateLibvirtd {
  /** This daemon's host UUID and hostname, its own (migration needs them to differ from the peer's). */
  readonly hostUuid: string;
  readonly hostname: string;
  /** Host path of the read-write socket. */
  readonly socketPath: string;
  /** `qemu:///system?socket=...`, for @unraid/libvirt and virsh. */
  readonly uri: string;
  readonly hypervisor: Hypervisor;
  /** Host PID of the namespace's PID 1 (QEMU's parent). */
  readonly initPid: number;
  /** Host PID of QEMU, or 0 when none runs. */
  qemuPid(): Promise<number>;
  /** Settles when the namespace is gone (libvirtd exited or was killed). */
  readonly exited: Promise<ExitInfo>;
  /** Kills the whole namespace and waits until it is gone. Idempotent. */
  stop(): Promise<void>;
}

export function libvirtUri(socketPath: string): string {
  return `qemu:///system?socket=${socketPath}`;
}

/** gid of a local group, from /etc/group; undefined when there is none. */
export async function lookupGroup(name: string): Promise<number | undefined> {
  for (const line of (await readFile('/etc/group', 'utf8')).split('\n')) {
    const f = line.split(':');
    if (f[0] === name && f[2]) return Number(f[2]);
  }
  return undefined;
}

/**
 * Who a VM's QEMU runs as: its own uid when the agent gave one, with the kvm
 * group (which /dev/kvm belongs to) as its gid; otherwise the shared
 * libvirt-qemu account (a launcher started by hand).
 */
export async function qemuIdentity(qemuUid: number | undefined): Promise<QemuIdentity> {
  if (qemuUid === undefined) return lookupUser(QEMU_USER);
  return { uid: qemuUid, gid: (await lookupGroup('kvm')) ?? qemuUid };
}

/** uid/gid of a local account, from /etc/passwd (no NSS lookup in Node). */
export async function lookupUser(name: string): Promise<{ uid: number; gid: number }> {
  for (const line of (await readFile('/etc/passwd', 'utf8')).split('\n')) {
    const f = line.split(':');
    if (f[0] === name && f[2] && f[3]) return { uid: Number(f[2]), gid: Number(f[3]) };
  }
  throw new Error(`user ${name} does not exist (deploy/setup.sh creates it)`);
}

/** How the daemon ended, in words. Its namespace's init shell passes a signal on as exit code 128 + its number. */
export function describeExit(e: ExitInfo): string {
  const number = e.code !== null && e.code > 128 ? e.code - 128 : undefined;
  const signal = e.signal ?? Object.entries(constants.signals).find(([, n]) => n === number)?.[0];
  return signal ? `was killed by ${signal}` : `exited with code ${e.code}`;
}

function exitOf(child: ChildProcess): Promise<ExitInfo> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });
}

/** libvirtd ended before it served; `output` is the end of what it and its namespace's init printed. */
export class LibvirtdStartError extends Error {
  readonly output: string;
  constructor(message: string, output: string) {
    super(message);
    this.name = 'LibvirtdStartError';
    this.output = output;
  }
}

/**
 * The error libvirt logged last before it gave up, without the time, thread and function ("<time>:
 * <thread>: error : <function>:<line> : <message>"): the driver's failure, which carries its cause. Not
 * the first: earlier errors can be harmless (dmidecode without /dev/mem), and not the daemon's closing
 * "Driver state initialization failed", which says nothing more. Else the last line of output that is
 * not libvirt's (the init script's own, say).
 */
export function libvirtError(output: string): string | undefined {
  const lines = output.split('\n').map((l) => l.trim());
  const errors = lines.filter((l) => / error : /.test(l) && !/ error : daemonRunStateInit:/.test(l));
  if (errors.length) return errors.at(-1)!.split(' : ').slice(2).join(' : ') || undefined;
  return lines.filter((l) => l && !/^\d{4}-\d\d-\d\d /.test(l)).pop();
}

async function tail(file: string, bytes = 2000): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.slice(-bytes).trim();
}

/** Host PIDs of a process's children, from /proc (needs CONFIG_PROC_CHILDREN). */
async function childPids(pid: number): Promise<number[]> {
  const text = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  return text.trim().split(/\s+/).filter(Boolean).map(Number);
}

/** QEMU is a child of the namespace's PID 1 (libvirt daemonizes it). */
async function findQemu(initPid: number): Promise<number> {
  for (const pid of await childPids(initPid)) {
    const comm = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '');
    if (comm.startsWith('qemu-system')) return pid;
  }
  return 0;
}

/** The lowest CPU this process may run on (the same for every launcher of a node). */
async function firstAllowedCpu(): Promise<number> {
  const status = await readFile('/proc/self/status', 'utf8');
  const list = /^Cpus_allowed_list:\s*(\d+)/m.exec(status)?.[1];
  return list === undefined ? 0 : Number(list);
}

export async function startPrivateLibvirtd(opts: LibvirtdOptions): Promise<PrivateLibvirtd> {
  const timeoutMs = opts.startTimeoutMs ?? 30_000;
  const dirs = MOUNTS.map((m) => path.join(opts.dir, m.name));
  const hostUuid = randomUUID();
  const hostname = `vkvm-${hostUuid.slice(0, 8)}`;
  const etc = path.join(opts.dir, 'etc');
  // Independent files, made side by side (each a round trip to the thread pool).
  const [, , installedDrivers, cpu] = await Promise.all([
    Promise.all(dirs.map((d) => mkdir(d, { recursive: true, mode: 0o755 }))).then(() =>
      Promise.all([
        writeFile(path.join(etc, 'libvirtd.conf'), libvirtdConf(hostUuid)),
        writeFile(path.join(etc, 'qemu.conf'), qemuConf(opts.qemu)),
      ]),
    ),
    (async () => {
      // Its parent as a cache directory is (other users pass through /var/cache/vkvm to the image cache), itself root's.
      await mkdir(path.dirname(opts.cacheDir), { recursive: true, mode: 0o755 });
      await mkdir(opts.cacheDir, { recursive: true, mode: 0o700 });
      await chmod(opts.cacheDir, 0o700);
      // The view's root is mounted there (the other private dirs exist only inside it); no Debian package creates it.
      await mkdir(MOUNTS[0].target, { recursive: true, mode: 0o755 });
    })(),
    findDriverDir(),
    firstAllowedCpu(),
  ]);
  const env = installedDrivers
    ? { ...process.env, LIBVIRT_DRIVER_DIR: await qemuOnlyDriverDir(path.join(opts.dir, 'drivers'), installedDrivers) }
    : process.env;

  opts.phases?.mark('libvirtdFiles');
  const outFile = path.join(opts.dir, 'libvirtd.out');
  const out = openSync(outFile, 'a', 0o600);
  let child: ChildProcess;
  try {
    child = spawn(
      'setpriv',
      [
        '--pdeathsig',
        'KILL',
        '--',
        // nsenter execs in place (no fork for a network namespace), so the death signal still reaches unshare.
        ...(opts.netns ? ['nsenter', `--net=${opts.netns}`, '--'] : []),
        'unshare',
        '--mount',
        '--pid',
        '--fork',
        '--uts',
        '--ipc',
        '--mount-proc',
        '--propagation',
        'private',
        '--kill-child=SIGKILL',
        '--',
        '/bin/sh',
        '-c',
        NAMESPACE_INIT_SCRIPT,
        'vkvm-ns-init',
        ...dirs,
        opts.cacheDir,
        opts.libvirtdPath ?? DEFAULT_LIBVIRTD,
        String(cpu),
        hostname,
        `${opts.qemu.uid}:${opts.qemu.gid}`,
        ...viewArgs(opts.view),
      ],
      { stdio: ['ignore', out, out], env },
    );
  } finally {
    closeSync(out);
  }
  opts.phases?.mark('libvirtdSpawned');
  const exited = exitOf(child);
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  const died = exited.then(async (e): Promise<never> => {
    const output = [await tail(outFile), await tail(path.join(opts.dir, 'log', 'libvirtd.log'))].filter(Boolean).join('\n');
    throw new LibvirtdStartError(
      `the VM's libvirt daemon failed to start: ${libvirtError(output) ?? `it exited with code ${e.code}, signal ${e.signal}`}`,
      output,
    );
  });

  const socketPath = path.join(dirs[0]!, 'libvirt-sock');
  try {
    await waitForUnixSocket(socketPath, timeoutMs, died);
    opts.phases?.mark('libvirtdSocket');
    const [initPid, ...extra] = await childPids(child.pid!);
    if (initPid === undefined || extra.length > 0) throw new Error(`unshare (pid ${child.pid}) should have one child`);
    const uri = libvirtUri(socketPath);
    const hypervisor = new Hypervisor({ uri });
    await withDeadline(Promise.race([hypervisor.connectOpen(), died]), timeoutMs, `connecting to ${uri}`);
    return { hostUuid, hostname, socketPath, uri, hypervisor, initPid, qemuPid: () => findQemu(initPid), exited, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

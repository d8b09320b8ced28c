// Command line of the launcher process. The node agent builds it with
// launcherArgv(); the launcher parses it with parseLauncherArgs().
import path from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_DOWNLOAD_POLICY, type DownloadPolicy } from '../vmm/disks/download-policy.js';
import type { HostFilePolicy, VolumeViewEntry } from '../vmm/host-files.js';
import { DEFAULT_LIBVIRTD } from './libvirtd.js';

export interface LauncherArgs {
  uid: string;
  /** Private directory of this VM: state file, sockets, console logs, libvirt state. */
  runDir: string;
  /** gRPC unix socket; default <runDir>/launcher.sock. */
  socket: string;
  /** cgroup path below each hierarchy's root; the VM's cgroup is <cgroupParent>/<uid>. */
  cgroupParent: string;
  cgroupRoot: string;
  libvirtd: string;
  emulator: string;
  /** Node-wide cache of downloaded disk images, shared by all launchers. */
  imageCacheDir: string;
  /** Node-wide libvirt cache (QEMU capabilities), shared by the node's launchers; seen as /var/cache/libvirt. */
  libvirtCacheDir: string;
  consoleLogMaxBytes: number;
  /** When false, a host without usable KVM makes the launcher fail instead of running TCG. */
  allowSoftwareEmulation: boolean;
  /** Network namespace (a /run/netns path) the VM's libvirtd and QEMU run in; the host's when absent. */
  netns?: string;
  /** The uid this VM's QEMU runs as, one per VM (the agent allocates it); the shared libvirt-qemu account when absent. */
  qemuUid?: number;
  /** Which host files the VM may name (the node operator's lists). */
  hostFiles: HostFilePolicy;
  /** Directories of the VM's PersistentVolume disks, and its published devices, which its QEMU's view must hold (filesystem-view.ts). */
  volumeDirs: VolumeViewEntry[];
  /** Where image URLs may lead, how large and how slow a download may be. */
  downloads: DownloadPolicy;
  logLevel: string;
}

export const DEFAULTS = {
  cgroupParent: 'vkvm',
  cgroupRoot: '/sys/fs/cgroup',
  libvirtd: DEFAULT_LIBVIRTD,
  emulator: '/usr/bin/qemu-system-x86_64',
  imageCacheDir: '/var/cache/vkvm/images',
  libvirtCacheDir: '/var/cache/vkvm/libvirt',
  consoleLogMaxBytes: 10 * 1024 * 1024,
  logLevel: 'info',
};

/** sockaddr_un.sun_path holds 108 bytes including the terminating NUL. */
const MAX_SOCKET_PATH = 107;

/** The first unix socket the launcher (or its libvirtd and QEMU) would make in `runDir` that does not fit in sun_path. */
export function socketPathTooLong(runDir: string, socket = path.join(runDir, 'launcher.sock')): string | undefined {
  const paths = [socket, path.join(runDir, 'qemu', 'console.sock'), path.join(runDir, 'libvirt', 'run', 'libvirt-sock-ro')];
  return paths.find((p) => Buffer.byteLength(p) > MAX_SOCKET_PATH);
}

export function parseLauncherArgs(argv: string[]): LauncherArgs {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      uid: { type: 'string' },
      'run-dir': { type: 'string' },
      socket: { type: 'string' },
      'cgroup-parent': { type: 'string' },
      'cgroup-root': { type: 'string' },
      libvirtd: { type: 'string' },
      emulator: { type: 'string' },
      'image-cache-dir': { type: 'string' },
      'libvirt-cache-dir': { type: 'string' },
      'console-log-max-bytes': { type: 'string' },
      'no-software-emulation': { type: 'boolean' },
      netns: { type: 'string' },
      'qemu-uid': { type: 'string' },
      'host-image-dir': { type: 'string', multiple: true },
      'host-disk-dir': { type: 'string', multiple: true },
      'denied-host-dir': { type: 'string', multiple: true },
      'image-store-dir': { type: 'string' },
      'volume-dir': { type: 'string', multiple: true },
      'volume-dir-ro': { type: 'string', multiple: true },
      'volume-device': { type: 'string', multiple: true },
      'volume-device-ro': { type: 'string', multiple: true },
      'download-max-bytes': { type: 'string' },
      'download-timeout-s': { type: 'string' },
      'download-idle-timeout-s': { type: 'string' },
      'download-deny': { type: 'string', multiple: true },
      'download-allow': { type: 'string', multiple: true },
      'log-level': { type: 'string' },
    },
  });
  const absolute = (flag: string, dirs: string[] = []): string[] =>
    dirs.map((d) => {
      if (!path.isAbsolute(d)) throw new Error(`--${flag} must be an absolute path, got ${JSON.stringify(d)}`);
      return path.resolve(d);
    });
  if (!values.uid || !/^[A-Za-z0-9][A-Za-z0-9-]*$/.test(values.uid))
    throw new Error('--uid is required: letters, digits and dashes (the VM uid)');
  if (!values['run-dir']) throw new Error('--run-dir is required');
  const runDir = path.resolve(values['run-dir']);
  const socket = path.resolve(values.socket ?? path.join(runDir, 'launcher.sock'));
  const tooLong = socketPathTooLong(runDir, socket);
  if (tooLong) throw new Error(`unix socket path ${tooLong} is longer than ${MAX_SOCKET_PATH} bytes; use a shorter --run-dir`);
  const positive = (flag: string, raw: string | undefined, dflt: number): number => {
    const n = Number(raw ?? dflt);
    if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`--${flag} must be a positive integer`);
    return n;
  };
  const d = DEFAULT_DOWNLOAD_POLICY;
  const downloads: DownloadPolicy = {
    maxBytes: positive('download-max-bytes', values['download-max-bytes'], d.maxBytes),
    timeoutMs: positive('download-timeout-s', values['download-timeout-s'], d.timeoutMs / 1000) * 1000,
    idleTimeoutMs: positive('download-idle-timeout-s', values['download-idle-timeout-s'], d.idleTimeoutMs / 1000) * 1000,
    deniedCidrs: values['download-deny'] ?? [],
    allowedCidrs: values['download-allow'] ?? [],
  };
  const maxBytes = Number(values['console-log-max-bytes'] ?? DEFAULTS.consoleLogMaxBytes);
  if (!Number.isInteger(maxBytes) || maxBytes < 4096) throw new Error('--console-log-max-bytes must be an integer >= 4096');
  if (values.netns !== undefined && !path.isAbsolute(values.netns))
    throw new Error('--netns must be an absolute path such as /run/netns/<name>');
  return {
    ...(values.netns ? { netns: values.netns } : {}),
    ...(values['qemu-uid'] !== undefined ? { qemuUid: positive('qemu-uid', values['qemu-uid'], 0) } : {}),
    uid: values.uid,
    runDir,
    socket,
    cgroupParent: values['cgroup-parent'] ?? DEFAULTS.cgroupParent,
    cgroupRoot: values['cgroup-root'] ?? DEFAULTS.cgroupRoot,
    libvirtd: values.libvirtd ?? DEFAULTS.libvirtd,
    emulator: values.emulator ?? DEFAULTS.emulator,
    imageCacheDir: path.resolve(values['image-cache-dir'] ?? DEFAULTS.imageCacheDir),
    libvirtCacheDir: path.resolve(values['libvirt-cache-dir'] ?? DEFAULTS.libvirtCacheDir),
    consoleLogMaxBytes: maxBytes,
    allowSoftwareEmulation: !values['no-software-emulation'],
    hostFiles: {
      imageDirs: absolute('host-image-dir', values['host-image-dir']),
      hostDiskDirs: absolute('host-disk-dir', values['host-disk-dir']),
      deniedDirs: absolute('denied-host-dir', values['denied-host-dir']),
      ...(values['image-store-dir'] ? { imageStoreDir: absolute('image-store-dir', [values['image-store-dir']])[0]! } : {}),
    },
    volumeDirs: [
      ...absolute('volume-dir', values['volume-dir']).map((p) => ({ path: p, readOnly: false })),
      ...absolute('volume-dir-ro', values['volume-dir-ro']).map((p) => ({ path: p, readOnly: true })),
      ...absolute('volume-device', values['volume-device']).map((p) => ({ path: p, readOnly: false, device: true })),
      ...absolute('volume-device-ro', values['volume-device-ro']).map((p) => ({ path: p, readOnly: true, device: true })),
    ],
    downloads,
    logLevel: values['log-level'] ?? DEFAULTS.logLevel,
  };
}

/** The inverse of parseLauncherArgs for the fields a caller sets; defaults are left out. */
export function launcherArgv(a: Pick<LauncherArgs, 'uid' | 'runDir'> & Partial<LauncherArgs>): string[] {
  const argv = ['--uid', a.uid, '--run-dir', a.runDir];
  if (a.socket) argv.push('--socket', a.socket);
  if (a.cgroupParent) argv.push('--cgroup-parent', a.cgroupParent);
  if (a.cgroupRoot) argv.push('--cgroup-root', a.cgroupRoot);
  if (a.libvirtd) argv.push('--libvirtd', a.libvirtd);
  if (a.emulator) argv.push('--emulator', a.emulator);
  if (a.imageCacheDir) argv.push('--image-cache-dir', a.imageCacheDir);
  if (a.libvirtCacheDir) argv.push('--libvirt-cache-dir', a.libvirtCacheDir);
  if (a.consoleLogMaxBytes) argv.push('--console-log-max-bytes', String(a.consoleLogMaxBytes));
  if (a.allowSoftwareEmulation === false) argv.push('--no-software-emulation');
  if (a.netns) argv.push('--netns', a.netns);
  if (a.qemuUid !== undefined) argv.push('--qemu-uid', String(a.qemuUid));
  for (const d of a.hostFiles?.imageDirs ?? []) argv.push('--host-image-dir', d);
  for (const d of a.hostFiles?.hostDiskDirs ?? []) argv.push('--host-disk-dir', d);
  for (const d of a.hostFiles?.deniedDirs ?? []) argv.push('--denied-host-dir', d);
  if (a.hostFiles?.imageStoreDir) argv.push('--image-store-dir', a.hostFiles.imageStoreDir);
  for (const v of a.volumeDirs ?? []) argv.push(`--volume-${v.device ? 'device' : 'dir'}${v.readOnly ? '-ro' : ''}`, v.path);
  if (a.downloads) {
    argv.push('--download-max-bytes', String(a.downloads.maxBytes));
    argv.push('--download-timeout-s', String(Math.ceil(a.downloads.timeoutMs / 1000)));
    argv.push('--download-idle-timeout-s', String(Math.ceil(a.downloads.idleTimeoutMs / 1000)));
    for (const c of a.downloads.deniedCidrs) argv.push('--download-deny', c);
    for (const c of a.downloads.allowedCidrs) argv.push('--download-allow', c);
  }
  if (a.logLevel) argv.push('--log-level', a.logLevel);
  return argv;
}

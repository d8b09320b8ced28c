// Reads the facts about this host that node status is derived from. All I/O
// for node status lives here; status.ts is pure.
import { readFile, stat, statfs, mkdir } from 'node:fs/promises';
import { hostname } from 'node:os';
import si, { type Systeminformation } from 'systeminformation';
import { probeHostCaps, type HostCaps } from '../../vmm/probe/virtualization.js';
import { evaluatePreflight, type PreflightCheck } from '../preflight/checks.js';
import { readPreflightFacts } from '../preflight/facts.js';
import { readNodeImages, type NodeImage } from '../images/node-images.js';
import { ImageStore } from '../images/store.js';
import { defaultRouteAddress } from './default-address.js';

/** One filesystem's space and inodes, as the kubelet's eviction signals read them. */
export interface FsFacts {
  /** The directory it was read at, for messages. */
  dir: string;
  totalBytes: number;
  /** What an unprivileged writer may still use (statfs bavail). */
  availableBytes: number;
  inodes: number;
  inodesFree: number;
}

export interface HostFacts {
  hostname: string;
  internalIP: string | null;
  cpuCount: number;
  memoryTotalBytes: number;
  memoryAvailableBytes: number;
  /** The filesystem of the state dir, where VM disks, overlays and console logs live: the kubelet's nodefs. */
  nodeFs: FsFacts;
  /** The filesystems of the image store and the URL image cache, one when they share it: the kubelet's imagefs. */
  imageFs: FsFacts[];
  pidMax: number;
  pidsInUse: number;
  kernelVersion: string;
  osImage: string;
  architecture: string;
  machineID: string;
  bootID: string;
  virtualization: HostCaps;
  /** The join preflight, re-run with every read: reported as node conditions. */
  preflight: PreflightCheck[];
  /** What the image store holds, as node.status.images. */
  images: NodeImage[];
}

async function readTrimmed(path: string): Promise<string> {
  return (await readFile(path, 'utf8')).trim();
}

async function countPids(): Promise<number> {
  // /proc/loadavg's 4th field is "running/total" scheduling entities (threads),
  // which is what pid_max limits.
  const loadavg = await readTrimmed('/proc/loadavg');
  const total = Number(loadavg.split(' ')[3]?.split('/')[1]);
  return Number.isFinite(total) ? total : 0;
}

const GO_ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', s390x: 's390x', ppc64: 'ppc64le' };

export interface HostFactsOptions {
  stateDir: string;
  imageCacheDir: string;
  /** Where required executables are looked up (the agent's PATH). */
  searchPath: string;
  internalIP?: string;
  allowSoftwareEmulation: boolean;
  /** The registry image store (provider/images/store.ts). */
  imageStoreDir: string;
}

type FsOnDevice = FsFacts & { dev: number };
const withoutDev = ({ dev: _, ...f }: FsOnDevice): FsFacts => f;

async function readFs(dir: string): Promise<FsOnDevice> {
  await mkdir(dir, { recursive: true });
  const [fs, st] = await Promise.all([statfs(dir), stat(dir)]);
  return {
    dir,
    dev: st.dev,
    totalBytes: fs.blocks * fs.bsize,
    availableBytes: fs.bavail * fs.bsize,
    inodes: fs.files,
    inodesFree: fs.ffree,
  };
}

/** The image store's and the cache's filesystems, each once. */
async function readImageFs(dirs: string[]): Promise<FsFacts[]> {
  const all = await Promise.all(dirs.map(readFs));
  return all.filter((f, i) => all.findIndex((o) => o.dev === f.dev) === i).map(withoutDev);
}

/**
 * What does not change while the agent runs (CPUs, kernel, distribution),
 * read once: systeminformation runs commands for them, and host facts are
 * read every few seconds (node status, the lease's health check).
 */
let staticFacts: Promise<[Systeminformation.CpuData, Systeminformation.OsData]> | undefined;

export async function readHostFacts(opts: HostFactsOptions): Promise<HostFacts> {
  staticFacts ??= Promise.all([si.cpu(), si.osInfo()]).catch((err: unknown) => {
    staticFacts = undefined;
    throw err;
  });
  const [[cpu, os], mem, iface, nodeFs, imageFs, pidMax, pidsInUse, machineID, bootID, virtualization, images] = await Promise.all([
    staticFacts,
    si.mem(),
    opts.internalIP ? Promise.resolve(null) : defaultRouteAddress(),
    readFs(opts.stateDir),
    readImageFs([opts.imageStoreDir, opts.imageCacheDir]),
    readTrimmed('/proc/sys/kernel/pid_max').then(Number),
    countPids(),
    readTrimmed('/etc/machine-id').catch(() => ''),
    readTrimmed('/proc/sys/kernel/random/boot_id').catch(() => ''),
    probeHostCaps(opts.allowSoftwareEmulation),
    readNodeImages(new ImageStore(opts.imageStoreDir)),
  ]);
  const preflight = evaluatePreflight(await readPreflightFacts({ searchPath: opts.searchPath, imageCacheDir: opts.imageCacheDir }), {
    allowSoftwareEmulation: opts.allowSoftwareEmulation,
  });
  return {
    hostname: hostname().toLowerCase(),
    internalIP: opts.internalIP ?? iface,
    cpuCount: cpu.cores,
    memoryTotalBytes: mem.total,
    memoryAvailableBytes: mem.available,
    nodeFs: withoutDev(nodeFs),
    imageFs,
    pidMax,
    pidsInUse,
    kernelVersion: os.kernel,
    osImage: `${os.distro} ${os.release}${os.codename ? ` (${os.codename})` : ''}`,
    architecture: GO_ARCH[os.arch] ?? os.arch,
    machineID,
    bootID,
    virtualization,
    preflight,
    images,
  };
}

// Reads the facts about this host that node status is derived from. All I/O
// for node status lives here; status.ts is pure.
import { readFile, statfs, mkdir } from 'node:fs/promises';
import { hostname } from 'node:os';
import si, { type Systeminformation } from 'systeminformation';
import { probeHostCaps, type HostCaps } from '../../vmm/probe/virtualization.js';
import { evaluatePreflight, type PreflightCheck } from '../preflight/checks.js';
import { readPreflightFacts } from '../preflight/facts.js';
import { readNodeImages, type NodeImage } from '../images/node-images.js';
import { ImageStore } from '../images/store.js';
import { defaultRouteAddress } from './default-address.js';

export interface HostFacts {
  hostname: string;
  internalIP: string | null;
  cpuCount: number;
  memoryTotalBytes: number;
  memoryAvailableBytes: number;
  /** Filesystem holding the state dir (VM disks live there). */
  diskTotalBytes: number;
  diskAvailableBytes: number;
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

/**
 * What does not change while the agent runs (CPUs, kernel, distribution),
 * read once: systeminformation runs commands for them, and host facts are
 * read every few seconds (node status, the lease's health check).
 */
let staticFacts: Promise<[Systeminformation.CpuData, Systeminformation.OsData]> | undefined;

export async function readHostFacts(opts: HostFactsOptions): Promise<HostFacts> {
  await mkdir(opts.stateDir, { recursive: true });
  staticFacts ??= Promise.all([si.cpu(), si.osInfo()]).catch((err: unknown) => {
    staticFacts = undefined;
    throw err;
  });
  const [[cpu, os], mem, iface, fs, pidMax, pidsInUse, machineID, bootID, virtualization, images] = await Promise.all([
    staticFacts,
    si.mem(),
    opts.internalIP ? Promise.resolve(null) : defaultRouteAddress(),
    statfs(opts.stateDir),
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
    diskTotalBytes: fs.blocks * fs.bsize,
    diskAvailableBytes: fs.bavail * fs.bsize,
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

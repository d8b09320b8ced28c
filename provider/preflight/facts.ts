// Reads the facts preflight judges. Read-only: nothing is created, so a
// failed `vkvm join` leaves the host as it was.
import { constants } from 'node:fs';
import { access, readFile, statfs } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { detectLayout, DEFAULT_CGROUP_ROOT, lookupUser, QEMU_USER } from '../../launcher/agent-api.js';
import { readVirtualizationFacts, decideAccelerator } from '../../vmm/probe/virtualization.js';
import { REQUIRED_EXECUTABLES, type PreflightFacts, type RequiredExecutable } from './checks.js';

export interface PreflightOptions {
  /** Where executables are looked up: the PATH of the vkvm process. */
  searchPath: string;
  imageCacheDir: string;
  cgroupRoot?: string;
}

async function findExecutable(name: string, searchPath: string): Promise<string | null> {
  for (const dir of searchPath.split(':').filter(Boolean)) {
    const candidate = join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  return null;
}

/** statfs of the directory, or of its nearest existing ancestor when it does not exist yet. */
async function freeBytes(dir: string): Promise<number> {
  for (let d = resolve(dir); ; d = dirname(d)) {
    try {
      const fs = await statfs(d);
      return fs.bavail * fs.bsize;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || d === dirname(d)) throw err;
    }
  }
}

function meminfoField(meminfo: string, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(meminfo);
  return m?.[1] ? Number(m[1]) : 0;
}

export async function readPreflightFacts(opts: PreflightOptions): Promise<PreflightFacts> {
  const executables = Object.fromEntries(
    await Promise.all(REQUIRED_EXECUTABLES.map(async (e) => [e, await findExecutable(e, opts.searchPath)] as const)),
  ) as Record<RequiredExecutable, string | null>;
  const virtqemud = await findExecutable('virtqemud', opts.searchPath);
  const [meminfo, ipForward, qemuUserExists, cgroupProblem, virt, imageCacheAvailableBytes] = await Promise.all([
    readFile('/proc/meminfo', 'utf8'),
    readFile('/proc/sys/net/ipv4/ip_forward', 'utf8').catch(() => '0'),
    lookupUser(QEMU_USER).then(
      () => true,
      () => false,
    ),
    detectLayout(opts.cgroupRoot ?? DEFAULT_CGROUP_ROOT).then(
      () => null,
      (err: Error) => err.message,
    ),
    readVirtualizationFacts(),
    freeBytes(opts.imageCacheDir),
  ]);
  return {
    executables,
    virtqemud,
    qemuUserExists,
    cgroupProblem,
    // Always decided with TCG allowed: whether KVM is required is the checks' call.
    virtualization: decideAccelerator(virt, true),
    memoryAvailableBytes: meminfoField(meminfo, 'MemAvailable') * 1024,
    imageCacheAvailableBytes,
    hugepagesTotal: meminfoField(meminfo, 'HugePages_Total'),
    hugepagesFree: meminfoField(meminfo, 'HugePages_Free'),
    ipForwarding: ipForward.trim() === '1',
  };
}

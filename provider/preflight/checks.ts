// Host preflight: what vkvm needs from a host, judged by pure functions from
// facts read in facts.ts. `vkvm join` stops on a failed hard check, with the
// fix; the agent reports every check continuously as a node condition (never
// as a label, so no pod's nodeSelector can depend on a passing check).
import type { HostCaps } from '../../vmm/probe/virtualization.js';

export interface PreflightFacts {
  /** Absolute path of each required executable found in the search path, or null. */
  executables: Record<RequiredExecutable, string | null>;
  /** Modular libvirt's QEMU daemon, reported when libvirtd itself is missing. */
  virtqemud: string | null;
  qemuUserExists: boolean;
  /** Why the cgroup layout is unusable for launchers, or null when it is fine. */
  cgroupProblem: string | null;
  virtualization: HostCaps;
  memoryAvailableBytes: number;
  /** Free space on the filesystem that holds (or will hold) the image cache. */
  imageCacheAvailableBytes: number;
  hugepagesTotal: number;
  hugepagesFree: number;
  ipForwarding: boolean;
}

/**
 * The launcher runs the monolithic libvirtd (Debian 12 has no virtqemud);
 * a host with only modular libvirt's virtqemud is not supported yet.
 */
export const REQUIRED_EXECUTABLES = ['qemu-system-x86_64', 'qemu-img', 'libvirtd'] as const;
export type RequiredExecutable = (typeof REQUIRED_EXECUTABLES)[number];

export const MIN_MEMORY_AVAILABLE_BYTES = 1024 * 1024 * 1024;
export const MIN_IMAGE_CACHE_FREE_BYTES = 5 * 1024 * 1024 * 1024;

export interface PreflightCheck {
  /** Node condition type this check is reported as. */
  condition: string;
  /** A failed hard check stops `vkvm join`; a soft one is only reported. */
  severity: 'hard' | 'soft';
  ok: boolean;
  reason: string;
  message: string;
}

const gib = (b: number) => `${(b / 1024 ** 3).toFixed(1)} GiB`;

/** Every check, in a fixed order; `allowSoftwareEmulation: false` makes KVM a hard requirement. */
export function evaluatePreflight(f: PreflightFacts, opts: { allowSoftwareEmulation: boolean }): PreflightCheck[] {
  const missing: string[] = REQUIRED_EXECUTABLES.filter((e) => !f.executables[e]);
  const onlyModular = !f.executables.libvirtd && f.virtqemud ? ` (${f.virtqemud} is there, but vkvm's launcher runs libvirtd)` : '';
  const kvm = f.virtualization.accelerator === 'kvm';
  return [
    missing.length
      ? {
          condition: 'VirtualizationPackages',
          severity: 'hard',
          ok: false,
          reason: 'PackagesMissing',
          message: `not found in PATH: ${missing.join(', ')}${onlyModular}; install them with: apt-get install qemu-system-x86 qemu-utils libvirt-daemon libvirt-daemon-driver-qemu (or run deploy/setup.sh)`,
        }
      : {
          condition: 'VirtualizationPackages',
          severity: 'hard',
          ok: true,
          reason: 'PackagesInstalled',
          message: REQUIRED_EXECUTABLES.map((e) => f.executables[e]).join(', '),
        },
    f.qemuUserExists
      ? { condition: 'QemuUser', severity: 'hard', ok: true, reason: 'UserExists', message: 'user libvirt-qemu exists' }
      : {
          condition: 'QemuUser',
          severity: 'hard',
          ok: false,
          reason: 'UserMissing',
          message:
            'user libvirt-qemu does not exist (QEMU runs as it); create it with: groupadd -r libvirt-qemu && useradd -r -g libvirt-qemu -G kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu',
        },
    f.cgroupProblem
      ? {
          condition: 'CgroupLayout',
          severity: 'hard',
          ok: false,
          reason: 'CgroupControllersMissing',
          message: `${f.cgroupProblem}; mount cgroup v2 with the cpu, memory and pids controllers enabled`,
        }
      : {
          condition: 'CgroupLayout',
          severity: 'hard',
          ok: true,
          reason: 'CgroupControllersPresent',
          message: 'cpu, memory and pids controllers available',
        },
    kvm
      ? { condition: 'KVMUsable', severity: 'soft', ok: true, reason: 'KVM', message: f.virtualization.reason }
      : {
          condition: 'KVMUsable',
          severity: opts.allowSoftwareEmulation ? 'soft' : 'hard',
          ok: false,
          reason: 'SoftwareEmulation',
          message: `${f.virtualization.reason}; guests run under TCG, much slower (enable VT-x/AMD-V in the firmware and load kvm_intel or kvm_amd for KVM)`,
        },
    f.memoryAvailableBytes >= MIN_MEMORY_AVAILABLE_BYTES
      ? {
          condition: 'GuestMemory',
          severity: 'soft',
          ok: true,
          reason: 'SufficientMemory',
          message: `${gib(f.memoryAvailableBytes)} available`,
        }
      : {
          condition: 'GuestMemory',
          severity: 'soft',
          ok: false,
          reason: 'LowMemory',
          message: `only ${gib(f.memoryAvailableBytes)} available, below ${gib(MIN_MEMORY_AVAILABLE_BYTES)}: few guests will fit`,
        },
    f.imageCacheAvailableBytes >= MIN_IMAGE_CACHE_FREE_BYTES
      ? {
          condition: 'ImageCacheSpace',
          severity: 'soft',
          ok: true,
          reason: 'SufficientDisk',
          message: `${gib(f.imageCacheAvailableBytes)} free for the image cache`,
        }
      : {
          condition: 'ImageCacheSpace',
          severity: 'soft',
          ok: false,
          reason: 'LowDisk',
          message: `only ${gib(f.imageCacheAvailableBytes)} free for the image cache, below ${gib(MIN_IMAGE_CACHE_FREE_BYTES)}; free space or pass --image-cache-dir on a larger filesystem`,
        },
    f.hugepagesTotal > 0
      ? {
          condition: 'HugePages',
          severity: 'soft',
          ok: true,
          reason: 'HugePagesReserved',
          message: `${f.hugepagesFree} of ${f.hugepagesTotal} huge pages free`,
        }
      : {
          condition: 'HugePages',
          severity: 'soft',
          ok: false,
          reason: 'NoHugePages',
          message: 'no huge pages reserved (vm.nr_hugepages=0); guests use normal pages',
        },
    f.ipForwarding
      ? { condition: 'IPForwarding', severity: 'soft', ok: true, reason: 'Enabled', message: 'net.ipv4.ip_forward=1' }
      : {
          condition: 'IPForwarding',
          severity: 'soft',
          ok: false,
          reason: 'Disabled',
          message:
            'net.ipv4.ip_forward=0: vkvm enables forwarding on its pod bridge and uplink only; routes through other interfaces need sysctl -w net.ipv4.ip_forward=1',
        },
  ];
}

export const hardFailures = (checks: PreflightCheck[]): PreflightCheck[] => checks.filter((c) => !c.ok && c.severity === 'hard');

/** Failed hard checks, each with its fix: the user's to act on (printed without a stack). */
export class PreflightError extends Error {
  constructor(
    readonly failed: PreflightCheck[],
    consequence: string,
  ) {
    super(`preflight failed; ${consequence}. Fix and re-run:\n${failed.map((c) => `  - ${c.condition}: ${c.message}`).join('\n')}`);
    this.name = 'PreflightError';
  }
}

/** The report `vkvm join` prints: one line per check. */
export function formatPreflight(checks: PreflightCheck[]): string {
  return checks.map((c) => `  [${c.ok ? 'ok' : c.severity === 'hard' ? 'FAIL' : 'warn'}] ${c.condition}: ${c.message}`).join('\n');
}

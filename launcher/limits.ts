// Resource limits of a launcher's cgroup. The cgroup holds the launcher
// (Node, ~50 MiB), libvirtd (~30 MiB), virsh helpers and QEMU, so the memory
// limit is the guest's memory plus what those need; too tight and the kernel
// OOM-kills QEMU, which the guest sees as a power cut.
import { vcpuCount, type VmSpec } from '../vmm/spec.js';
import type { Accelerator } from '../vmm/probe/virtualization.js';
import type { CgroupLimits } from './cgroup.js';
import { cpuWeightIn, type RunPart } from './run-cpu-weight.js';

const MiB = 1024 * 1024;

/** Launcher + libvirtd + virsh helpers + QEMU's own baseline (devices, ROMs, I/O buffers). */
export const FIXED_OVERHEAD_MIB = 256;
/** Per vCPU: thread stacks and per-CPU state in QEMU and the kernel. */
export const PER_VCPU_OVERHEAD_MIB = 8;
/**
 * What TCG adds besides QEMU's baseline: the translation cache, capped by the
 * domain XML (vmm/domain/accel.ts, TCG_TB_CACHE_MIB), and the per-vCPU soft
 * TLBs and translation bookkeeping beside it. Left as it was before the cap
 * (when the cache could fill 1 GiB): headroom, until a measurement of a busy
 * big guest under the cap says how much of it can go.
 */
export const TCG_OVERHEAD_MIB = 256;
/** A VNC display's VGA card: its video memory (KubeVirt counts the same for a graphics device). */
export const GRAPHICS_OVERHEAD_MIB = 16;
/** Enough for QEMU's I/O and vCPU threads, libvirtd's workers and Node's pool. */
export const PIDS_MAX = 1024;

/** Memory for the cgroup: guest RAM, 1/64 of it for page tables and bookkeeping, and fixed costs. */
export function memoryLimitMiB(spec: Pick<VmSpec, 'memoryMiB' | 'cpu' | 'vnc'>, accelerator: Accelerator): number {
  return (
    spec.memoryMiB +
    Math.ceil(spec.memoryMiB / 64) +
    FIXED_OVERHEAD_MIB +
    PER_VCPU_OVERHEAD_MIB * vcpuCount(spec.cpu) +
    (accelerator === 'tcg' ? TCG_OVERHEAD_MIB : 0) +
    (spec.vnc ? GRAPHICS_OVERHEAD_MIB : 0)
  );
}

/** The limits, and the CPU weight of `part` of the run (run-cpu-weight.ts). */
export function cgroupLimits(spec: Pick<VmSpec, 'memoryMiB' | 'cpu' | 'vnc'>, accelerator: Accelerator, part: RunPart): CgroupLimits {
  return {
    memoryBytes: memoryLimitMiB(spec, accelerator) * MiB,
    cpuWeight: cpuWeightIn(part, spec),
    ...(spec.cpu.limitMillicores !== undefined ? { cpuMillicores: spec.cpu.limitMillicores } : {}),
    pidsMax: PIDS_MAX,
  };
}

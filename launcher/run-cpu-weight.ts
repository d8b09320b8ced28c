// Which CPU weight a VM's cgroup has in which part of its run (#29). The
// cgroup holds the launcher, libvirtd and QEMU besides the guest's vCPUs, so
// the pod's weight (its CPU request: 10m is 10 shares) set before QEMU starts
// also made vkvm's own start work (QEMU's spawn, the console attach, the
// resume) compete as 1/101 of the node's VMs against 100 busy guests. Until
// the vCPUs first run they are paused and the guest can use nothing, so the
// cgroup keeps the system's default weight; the pod's applies from the resume
// that first runs them (a boot's, or a migration target's) for the rest of
// the VM's life, pauses and reboots included: nothing sets the default again.
// Limits (memory, CPU quota, pids) are not deferred: they are ceilings the
// tenant asked for, and apply before QEMU starts.
import type { VmSpec } from '../vmm/spec.js';
import type { CpuWeight } from './cgroup.js';
import { milliCpuToShares } from './cpu-shares.js';

/** Before the vCPUs first run (vkvm's start work), or from then on. */
export type RunPart = 'starting' | 'running';

export function cpuWeightIn(part: RunPart, spec: Pick<VmSpec, 'cpu'>): CpuWeight {
  return part === 'starting' ? 'default' : { shares: milliCpuToShares(spec.cpu.requestMillicores ?? 0) };
}

// A CPU request as the cgroup's CPU weight, converted exactly as the kubelet
// does (pkg/kubelet/cm: MilliCPUToShares, then on cgroup v2
// cpuSharesToCPUWeight), integer arithmetic included: under contention a VM
// gets CPU in proportion to its request, as a pod does.

/** The kernel's bounds on cgroup v1 cpu.shares. */
const MIN_SHARES = 2;
const MAX_SHARES = 262_144;

/** CPU shares for a request, as the kubelet's MilliCPUToShares: 1024 per core, none requested is the least (2). */
export function milliCpuToShares(milliCpu: number): number {
  return Math.min(MAX_SHARES, Math.max(MIN_SHARES, Math.floor((milliCpu * 1024) / 1000)));
}

/** cgroup v2 cpu.weight for CPU shares, as the kubelet's cpuSharesToCPUWeight (KEP-2254): [2, 262144] onto [1, 10000]. */
export function cpuSharesToWeight(shares: number): number {
  return 1 + Math.floor(((shares - MIN_SHARES) * 9999) / 262_142);
}

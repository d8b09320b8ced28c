// A VMI's QEMU iothreads and virtio-blk queues, as KubeVirt's converter sets
// them (converter/iothreads/iothreads.go, storage/disk.go):
//   - with spec.domain.ioThreadsPolicy set, or any disk's dedicatedIOThread,
//     the VM gets iothreads: each dedicated disk one of its own, the other
//     disks a pool; `shared` makes the pool one thread, `auto` up to two per
//     requested CPU (requests.cpu rounded up, else limits.cpu, else 1);
//   - every disk counts towards the pool and the dedicated threads, but only
//     virtio disks are put on one: pool threads 1..n in turn, dedicated
//     threads n+1.. in disk order (so thread ids match KubeVirt's domain);
//   - blockMultiQueue gives every virtio disk one queue per vCPU.
// supplementalPool (every disk on all of ioThreads.supplementalPoolThreadCount
// threads) needs libvirt 10 and QEMU 9's iothread-vq-mapping; the nodes run
// libvirt 9 and QEMU 7.2, so it is refused rather than run as something else.
// A dedicatedIOThread on a SATA or SCSI disk is not realized (KubeVirt gives
// SCSI's controller a thread; vkvm does not) and is reported as unsupported.
// Pure.
import { parseQuantity } from '../kube/quantity.js';
import { vcpuCount, type CpuSpec } from '../../vmm/spec.js';
import { IO_THREADS_POLICIES } from '../../crds/subset/constants.js';
import type { Draft } from './draft.js';
import type { Disk, DomainSpec } from './types.js';

const POLICY = 'spec.domain.ioThreadsPolicy';
const MULTI_QUEUE = 'spec.domain.devices.blockMultiQueue';
/** KubeVirt's auto pool: two iothreads per requested CPU. */
const IO_THREADS_PER_CPU = 2;

/** Requested CPUs as KubeVirt's Quantity.Value() counts them: rounded up; requests.cpu, else limits.cpu, else 1. */
function requestedCpus(domain: DomainSpec): number {
  const raw = domain.resources?.requests?.cpu ?? domain.resources?.limits?.cpu;
  const n = raw === undefined || raw === null ? null : parseQuantity(String(raw));
  return n === null ? 1 : Math.ceil(n);
}

/** How many pool threads the policy allows (KubeVirt's getThreadPoolLimit). */
function poolLimit(policy: 'shared' | 'auto' | undefined, domain: DomainSpec): number {
  return policy === 'auto' ? requestedCpus(domain) * IO_THREADS_PER_CPU : 1;
}

function checkBoolean(d: Draft, value: unknown, at: string): boolean {
  if (value === undefined || value === null) return false;
  if (typeof value !== 'boolean') d.report(at, 'FieldValueInvalid', `${at} must be true or false, not ${JSON.stringify(value)}`);
  return value === true;
}

/** The policy, or null after reporting a value vkvm cannot run. */
function policyOf(d: Draft, domain: DomainSpec): 'shared' | 'auto' | undefined | null {
  const policy: unknown = domain.ioThreadsPolicy;
  if (policy === undefined || policy === null) return undefined;
  if (policy === 'shared' || policy === 'auto') return policy;
  if (policy === 'supplementalPool') {
    d.report(
      POLICY,
      'FieldValueNotSupported',
      `${POLICY} supplementalPool needs libvirt 10 and QEMU 9 (a disk's queues on several iothreads); vkvm's nodes run neither: use shared or auto`,
    );
  } else {
    d.report(
      POLICY,
      'FieldValueInvalid',
      `Invalid IOThreadsPolicy (${JSON.stringify(policy)}): must be one of ${IO_THREADS_POLICIES.join(', ')}`,
    );
  }
  return null;
}

/**
 * Puts the VMI's virtio disks on iothreads and sets their queues, on the
 * draft's disks (by their origin); returns the VM's iothread count, absent
 * when it has none. `disks` is spec.domain.devices.disks, `cpu` the guest's.
 */
export function translateIoThreads(d: Draft, domain: DomainSpec, disks: readonly Disk[], cpu: CpuSpec): number | undefined {
  const policy = policyOf(d, domain);
  const multiQueue = checkBoolean(d, domain.devices?.blockMultiQueue, MULTI_QUEUE);
  const dedicated = disks.map((disk, i) => checkBoolean(d, disk.dedicatedIOThread, `spec.domain.devices.disks[${i}].dedicatedIOThread`));
  if (policy === null) return undefined;

  const byOrigin = new Map(d.diskOrigins.map((o, k) => [o.disk, d.disks[k]!] as const));
  const virtio = (i: number) => {
    const disk = byOrigin.get(`spec.domain.devices.disks[${i}]`);
    return disk?.bus === 'virtio' ? disk : undefined;
  };
  if (multiQueue) {
    for (let i = 0; i < disks.length; i++) {
      const disk = virtio(i);
      if (disk) disk.queues = Math.max(1, vcpuCount(cpu));
    }
  }

  if (policy === undefined && !dedicated.includes(true)) return undefined;
  const dedicatedCount = dedicated.filter(Boolean).length;
  const limit = poolLimit(policy, domain);
  let pool = disks.length - dedicatedCount;
  // Over the limit, the pool shrinks to what the dedicated threads leave, but keeps one thread.
  if (pool + dedicatedCount > limit) pool = Math.max(1, limit - dedicatedCount);

  let nextPool = 1;
  let nextDedicated = pool + 1;
  disks.forEach((_, i) => {
    const disk = virtio(i);
    if (!disk) {
      if (dedicated[i]) d.unsupported.push(`spec.domain.devices.disks[${i}].dedicatedIOThread`);
      return;
    }
    if (dedicated[i]) disk.ioThread = nextDedicated++;
    else {
      disk.ioThread = nextPool;
      nextPool = (nextPool % pool) + 1;
    }
  });
  const count = pool + dedicatedCount;
  return count > 0 ? count : undefined;
}

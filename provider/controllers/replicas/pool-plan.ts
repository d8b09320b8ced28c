// The VirtualMachinePool controller's pure half (KubeVirt's
// pkg/virt-controller/watch/pool): which VMs are the pool's, what a sync
// does (scale out to new indexed names, or scale in; once the count is
// right, bring VMs made from an older template up to date, and restart the
// VMIs such an update left behind), and the pool's ready count.
import { findCondition } from '../../kubevirt/conditions.js';
import type { ScaleInSortPolicy, VirtualMachinePool } from '../../kubevirt/replica-types.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../kubevirt/types.js';
import { BURST_REPLICAS, controlledBy } from './replicaset-plan.js';
import { indexOfName, newVmNames, POOL_TEMPLATE_LABEL, poolTemplateHash } from './pool-vm.js';
import { selectorMatches } from './selector.js';

/** The pool's VMs: controlled by it and matching its selector, being deleted or not (KubeVirt counts both). */
export function vmsOf(pool: VirtualMachinePool, vms: readonly VirtualMachine[]): VirtualMachine[] {
  const namespace = pool.metadata.namespace ?? 'default';
  return vms.filter(
    (vm) =>
      (vm.metadata.namespace ?? 'default') === namespace &&
      controlledBy(vm, pool.metadata.uid) &&
      selectorMatches(pool.spec.selector, vm.metadata.labels),
  );
}

export const isVmReady = (vm: VirtualMachine): boolean => findCondition(vm.status?.conditions, 'Ready')?.status === 'True';

/**
 * The order VMs leave on scale-in: KubeVirt's sort policies (pool.kubevirt.io
 * scaleInStrategy.proactive.selectionPolicy.sortPolicy, 1.8 on); Random, its
 * only order before and its default since. `random` in [0, 1).
 */
export function scaleInOrder(vms: readonly VirtualMachine[], policy: ScaleInSortPolicy, random: () => number): VirtualMachine[] {
  const index = (vm: VirtualMachine) => indexOfName(vm.metadata.name ?? '') ?? 0;
  const created = (vm: VirtualMachine) => Date.parse(vm.metadata.creationTimestamp ?? '') || 0;
  const sorted = [...vms];
  switch (policy) {
    case 'AscendingOrder':
      return sorted.sort((a, b) => index(a) - index(b));
    case 'DescendingOrder':
      return sorted.sort((a, b) => index(b) - index(a));
    case 'Newest':
      return sorted.sort((a, b) => created(b) - created(a));
    case 'Oldest':
      return sorted.sort((a, b) => created(a) - created(b));
    case 'Random':
      // Fisher-Yates, as Go's rand.Shuffle.
      for (let i = sorted.length - 1; i > 0; i--) {
        const j = Math.floor(random() * (i + 1));
        [sorted[i], sorted[j]] = [sorted[j]!, sorted[i]!];
      }
      return sorted;
  }
}

export type PoolPlan =
  | { kind: 'idle' }
  | { kind: 'scaleOut'; names: string[] }
  | { kind: 'scaleIn'; vms: VirtualMachine[] }
  /** The count is right: VMs to bring to the current template, and VMIs to restart on theirs. */
  | { kind: 'update'; vms: VirtualMachine[]; restart: VirtualMachineInstance[] };

export interface PoolPlanInput {
  pool: VirtualMachinePool;
  /** The pool's VMs (vmsOf). */
  owned: readonly VirtualMachine[];
  /** Every VM name in the pool's namespace: new names avoid them all. */
  takenNames: ReadonlySet<string>;
  /** The VMI of a VM, by the VM's name (a VM's VMI has its name). */
  vmiOf: (name: string) => VirtualMachineInstance | undefined;
  /** The VM's template changed since its VMI was made (vm-sync.ts restartRequired). */
  restartRequired: (vm: VirtualMachine, vmi: VirtualMachineInstance) => boolean;
  random: () => number;
}

/** What one sync does; nothing while paused or being deleted. */
export function planPool(i: PoolPlanInput): PoolPlan {
  const { pool, owned } = i;
  if (pool.spec.paused || pool.metadata.deletionTimestamp) return { kind: 'idle' };
  const diff = owned.length - (pool.spec.replicas ?? 1);
  if (diff < 0) return { kind: 'scaleOut', names: newVmNames(pool.metadata.name!, Math.min(-diff, BURST_REPLICAS), i.takenNames) };
  if (diff > 0) {
    const deleting = owned.filter((vm) => vm.metadata.deletionTimestamp);
    const count = Math.min(diff, BURST_REPLICAS) - deleting.length;
    if (count <= 0) return { kind: 'idle' };
    const eligible = owned.filter((vm) => !vm.metadata.deletionTimestamp);
    const policy = pool.spec.scaleInStrategy?.proactive?.selectionPolicy?.sortPolicy ?? 'Random';
    return { kind: 'scaleIn', vms: scaleInOrder(eligible, policy, i.random).slice(0, count) };
  }
  const hash = poolTemplateHash(pool);
  const live = owned.filter((vm) => !vm.metadata.deletionTimestamp);
  const outdated = live.filter((vm) => vm.metadata.labels?.[POOL_TEMPLATE_LABEL] !== hash);
  // KubeVirt's proactive update: a VM already on the current template whose VMI was made from an older one restarts.
  const restart = live
    .filter((vm) => vm.metadata.labels?.[POOL_TEMPLATE_LABEL] === hash)
    .flatMap((vm) => {
      const vmi = i.vmiOf(vm.metadata.name!);
      const stale = vmi && !vmi.metadata.deletionTimestamp && vmi.metadata.labels?.[POOL_TEMPLATE_LABEL] !== hash;
      return stale && i.restartRequired(vm, vmi) ? [vmi] : [];
    });
  return outdated.length || restart.length ? { kind: 'update', vms: outdated, restart } : { kind: 'idle' };
}

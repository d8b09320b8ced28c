// The VMI's LiveMigratable condition, as KubeVirt's virt-handler computes it
// (calculateLiveMigrationCondition, checkVolumesForMigration) for what vkvm
// runs, with its reasons; and the migration method: BlockMigration when a
// writable local disk (a containerDisk's overlay, an emptyDisk, a hostDisk)
// must be copied, else LiveMigration. The node writes both into the VMI's
// status (provider/pods/vmi-status.ts); migration admission reads the
// condition. First refusal wins. Pure.
import type { Accelerator } from '../../vmm/probe/virtualization.js';
import type { MigrationMethod, VirtualMachineInstance } from './types.js';
import { volumeClaimName } from './volume-claim.js';

export type MigratableReason = 'DisksNotLiveMigratable' | 'CPUModeLiveMigratable';

export type LiveMigratability =
  { migratable: true; method: MigrationMethod } | { migratable: false; reason: MigratableReason; message: string; method: MigrationMethod };

function diskRefusal(vmi: VirtualMachineInstance): string | undefined {
  for (const v of vmi.spec.volumes ?? []) {
    // vkvm serves claims from local, hostPath and CSI PersistentVolumes, none of them handed from node to node
    // during a migration (a CSI volume is staged and published on one node; KubeVirt needs ReadWriteMany).
    const claim = volumeClaimName(v);
    if (claim)
      return `cannot migrate VMI: PVC ${claim} is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)`;
    if (v.hostDisk && (v.hostDisk as { shared?: boolean }).shared !== true) return 'cannot migrate VMI with non-shared HostDisk';
  }
  return undefined;
}

/**
 * The CPU the guest sees must exist on the target: host-passthrough copies
 * the source host's, which is vkvm's KVM default (vmm/domain/accel.ts) when
 * the VMI names no model. Under TCG every model is emulated, so any is fine.
 */
function cpuRefusal(vmi: VirtualMachineInstance, accelerator: Accelerator | undefined): string | undefined {
  if (accelerator === 'tcg') return undefined;
  const model = vmi.spec.domain?.cpu?.model;
  if (model === 'host-passthrough') return 'cannot migrate VMI with host-passthrough CPU mode';
  if (!model && accelerator === 'kvm')
    return 'cannot migrate VMI: without spec.domain.cpu.model the VM runs host-passthrough under KVM; name a CPU model (or host-model)';
  return undefined;
}

export function liveMigratability(vmi: VirtualMachineInstance, accelerator: Accelerator | undefined): LiveMigratability {
  const volumes = vmi.spec.volumes ?? [];
  const method: MigrationMethod = volumes.some((v) => v.containerDisk || v.emptyDisk || v.hostDisk) ? 'BlockMigration' : 'LiveMigration';
  const disks = diskRefusal(vmi);
  if (disks) return { migratable: false, reason: 'DisksNotLiveMigratable', message: disks, method };
  const cpu = cpuRefusal(vmi, accelerator);
  if (cpu) return { migratable: false, reason: 'CPUModeLiveMigratable', message: cpu, method };
  return { migratable: true, method };
}

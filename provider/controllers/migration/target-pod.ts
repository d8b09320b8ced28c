// The target launcher pod of a live migration, as KubeVirt's migration
// controller renders it (createTargetPod, createMigrationPodAntiAffinityRule):
// the VMI's launcher pod, plus the migration's label, a required
// anti-affinity to the VMI's pods on kubernetes.io/hostname (never the
// source's node), the migration's addedNodeSelector merged under the VMI's
// own keys, and the source node's accelerator (a TCG guest never lands on a
// KVM node or the reverse: the CPU model differs). Pure.
import type { V1Affinity, V1Node, V1Pod } from '@kubernetes/client-node';
import type { Accelerator } from '../../../vmm/probe/virtualization.js';
import { VIRTUALIZATION_LABEL } from '../../node/status.js';
import { MIGRATION_JOB_LABEL } from '../../pods/migration-target.js';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { CREATED_BY_LABEL, launcherPodFor } from '../launcher-pod.js';

export const HOSTNAME_TOPOLOGY = 'kubernetes.io/hostname';

/** The source node's accelerator, from its label; KVM when unlabelled. */
export function sourceAccelerator(sourceNode: V1Node | undefined): Accelerator {
  return sourceNode?.metadata?.labels?.[VIRTUALIZATION_LABEL] === 'tcg' ? 'tcg' : 'kvm';
}

function withAntiAffinity(affinity: V1Affinity | undefined, vmiUid: string): V1Affinity {
  const anti = affinity?.podAntiAffinity ?? {};
  return {
    ...affinity,
    podAntiAffinity: {
      ...anti,
      requiredDuringSchedulingIgnoredDuringExecution: [
        ...(anti.requiredDuringSchedulingIgnoredDuringExecution ?? []),
        { labelSelector: { matchLabels: { [CREATED_BY_LABEL]: vmiUid } }, topologyKey: HOSTNAME_TOPOLOGY },
      ],
    },
  };
}

export function migrationTargetPod(
  vmi: VirtualMachineInstance,
  migration: VirtualMachineInstanceMigration,
  sourceNode: V1Node | undefined,
): V1Pod {
  const accelerator = sourceAccelerator(sourceNode);
  const pod = launcherPodFor(vmi, accelerator);
  const own = pod.spec!.nodeSelector ?? {};
  const sourceVirt = sourceNode?.metadata?.labels?.[VIRTUALIZATION_LABEL];
  return {
    ...pod,
    metadata: { ...pod.metadata, labels: { ...pod.metadata!.labels, [MIGRATION_JOB_LABEL]: migration.metadata.uid! } },
    spec: {
      ...pod.spec!,
      // The VMI's own keys win over what the migration adds (KubeVirt: addedNodeSelector never overrides).
      nodeSelector: { ...(migration.spec.addedNodeSelector ?? {}), ...(sourceVirt ? { [VIRTUALIZATION_LABEL]: sourceVirt } : {}), ...own },
      affinity: withAntiAffinity(pod.spec!.affinity, vmi.metadata.uid!),
      containers: pod.spec!.containers,
    },
  };
}

import t from 'tap';
import type { VirtualMachineInstance, VirtualMachineInstanceMigration } from '../../kubevirt/types.js';
import { migrationTargetPod } from './target-pod.js';

const vmi: VirtualMachineInstance = {
  metadata: { name: 'vm', namespace: 'ns', uid: 'vmi-uid', labels: { app: 'web' } },
  spec: {
    domain: { resources: { requests: { memory: '128Mi' } } },
    nodeSelector: { zone: 'a' },
    affinity: {
      podAntiAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: [{ labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'zone' }],
      },
    },
  },
};
const vmim: VirtualMachineInstanceMigration = {
  metadata: { name: 'kubevirt-migrate-vm-x', namespace: 'ns', uid: 'mig-uid' },
  spec: { vmiName: 'vm', addedNodeSelector: { zone: 'b', rack: '7' } },
};
const tcgNode = { metadata: { name: 'a', labels: { 'vkvm.io/virtualization': 'tcg' } } };

t.test(
  "the target pod is the VMI's launcher pod, kept off the VMI's node, on the source's accelerator, under the VMI's own node keys",
  async (t) => {
    const pod = migrationTargetPod(vmi, vmim, tcgNode);
    t.match(pod, {
      metadata: {
        generateName: 'virt-launcher-vm-',
        labels: {
          'kubevirt.io/migrationJobUID': 'mig-uid',
          'kubevirt.io/created-by': 'vmi-uid',
          'kubevirt.io': 'virt-launcher',
          app: 'web',
        },
        ownerReferences: [{ kind: 'VirtualMachineInstance', uid: 'vmi-uid', controller: true }],
      },
      spec: {
        nodeSelector: { zone: 'a', rack: '7', 'vkvm.io/virtualization': 'tcg', 'kubevirt.io/schedulable': 'true' },
        affinity: {
          podAntiAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: [
              { labelSelector: { matchLabels: { app: 'db' } }, topologyKey: 'zone' },
              { labelSelector: { matchLabels: { 'kubevirt.io/created-by': 'vmi-uid' } }, topologyKey: 'kubernetes.io/hostname' },
            ],
          },
        },
      },
    });
    t.same(
      vmi.spec.affinity?.podAntiAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.length,
      1,
      "the VMI's affinity is not changed",
    );
  },
);

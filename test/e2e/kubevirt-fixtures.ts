// KubeVirt manifests the e2e tests share.
import type { VirtualMachineInstanceSpec } from '../../provider/kubevirt/types.js';

/**
 * The VMI spec of KubeVirt's quickstart smoke VM: 1 core, q35, containerDisk
 * + emptyDisk + cloudInitNoCloud on virtio, masquerade on the pod network.
 * Its demo image is served by the test guest; memory is 128Mi because the
 * docs' 64M is below what the test guest's Debian kernel boots in.
 */
export function smokeVmiSpec(): VirtualMachineInstanceSpec {
  return {
    domain: {
      cpu: { cores: 1 },
      machine: { type: 'q35' },
      resources: { requests: { memory: '128Mi' } },
      devices: {
        disks: [
          { name: 'containerdisk', disk: { bus: 'virtio' } },
          { name: 'emptydisk', disk: { bus: 'virtio' } },
          { name: 'cloudinitdisk', disk: { bus: 'virtio' } },
        ],
        interfaces: [{ name: 'default', masquerade: {} }],
      },
    },
    networks: [{ name: 'default', pod: {} }],
    volumes: [
      { name: 'containerdisk', containerDisk: { image: 'quay.io/kubevirt/cirros-container-disk-demo' } },
      { name: 'emptydisk', emptyDisk: { capacity: '64Mi' } },
      { name: 'cloudinitdisk', cloudInitNoCloud: { userDataBase64: 'SGkuXG4=' } },
    ],
  };
}

// Before the multi-node suite's Ctrl-C: a VMI on each vkvm node with a Block
// and a Filesystem claim of the default class, left running, so that the
// stop must take their CSI volumes down (the agent's stop with its VMs on
// node 1, the simulated host's stop on node 2: provider/csi-node/take-down.ts)
// for the footprint check after it to find no mount or loop device left.
import type { Test } from 'tap';
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { smokeVmiSpec, virtualMachineInstances, waitFor, type UpCluster } from '../framework/index.js';

const NAMESPACE = 'vkvm-volumes-at-stop';

const claim = (name: string, volumeMode: 'Block' | 'Filesystem'): V1PersistentVolumeClaim => ({
  metadata: { name },
  spec: { accessModes: ['ReadWriteOnce'], volumeMode, resources: { requests: { storage: '16Mi' } } },
});

/** Leaves the VMIs Running, their volumes published (a loop device each for the Block ones). */
export async function leaveVmsWithVolumes(t: Test, up: UpCluster): Promise<void> {
  const { core, custom } = up.clients;
  await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
  const nodes = up.nodes.filter((n) => !n.container);
  await Promise.all(
    nodes.map(async (node) => {
      const [block, fs] = [`${node.name}-block`, `${node.name}-fs`];
      await core.createNamespacedPersistentVolumeClaim({ namespace: NAMESPACE, body: claim(block, 'Block') });
      await core.createNamespacedPersistentVolumeClaim({ namespace: NAMESPACE, body: claim(fs, 'Filesystem') });
      const spec = smokeVmiSpec();
      spec.nodeSelector = { 'kubernetes.io/hostname': node.name };
      for (const name of [block, fs]) {
        spec.domain.devices!.disks!.push({ name, disk: { bus: 'virtio' } });
        spec.volumes!.push({ name, persistentVolumeClaim: { claimName: name } });
      }
      const body = { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: node.name }, spec };
      await custom.createNamespacedCustomObject({
        group: 'kubevirt.io',
        version: 'v1',
        namespace: NAMESPACE,
        plural: 'virtualmachineinstances',
        body,
      });
    }),
  );
  const running = await Promise.all(
    nodes.map((node) =>
      waitFor(virtualMachineInstances(up.clients, NAMESPACE, { name: node.name }), (v) => v.status?.phase === 'Running', {
        what: 'Running',
        deadlineMs: 180_000,
      }),
    ),
  );
  t.same(
    running.map((v) => v.status?.nodeName),
    nodes.map((n) => n.name),
    'a VMI with a Block and a Filesystem claim runs on each vkvm node as vkvm up is stopped',
  );
}

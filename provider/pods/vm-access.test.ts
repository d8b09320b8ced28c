// VmAccess's VMI lookup over a pod cache and a registry fake: the launcher pod
// a VMI's console and guest queries go to.
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import type { LauncherRegistry } from '../launchers/registry.js';
import { createVmAccess } from './vm-access.js';

const launcherPod = (name: string, namespace: string, uid: string, vmi?: string): V1Pod => ({
  metadata: {
    name,
    namespace,
    uid,
    labels: { 'kubevirt.io': 'virt-launcher', 'vm.kubevirt.io/name': vmi ?? 'testvm' },
    ...(vmi
      ? {
          ownerReferences: [
            { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', name: vmi, uid: `vmi-${uid}`, controller: true },
          ],
        }
      : {}),
  },
  spec: { containers: [{ name: 'compute' }] },
});

t.test("a VMI's launcher pod: controlled by a VMI of that name in that namespace, the one whose VM is up first", async (t) => {
  const pods = [
    launcherPod('virt-launcher-testvm-old', 'ns', 'old', 'testvm'),
    launcherPod('virt-launcher-testvm-new', 'ns', 'new', 'testvm'),
    launcherPod('virt-launcher-testvm-else', 'elsewhere', 'else', 'testvm'),
    // Labelled like a launcher pod, but no VMI controls it: a tenant's own pod.
    launcherPod('impostor', 'tenant', 'imp'),
  ];
  const registry = { get: (uid: string) => (uid === 'new' ? { live: true } : uid === 'old' ? { live: false } : undefined) };
  const vms = createVmAccess({ pods: () => pods, pod: () => undefined }, registry as unknown as LauncherRegistry, {
    addressOf: async () => undefined,
  });
  t.same(vms.vmiPod('ns', 'testvm'), { namespace: 'ns', name: 'virt-launcher-testvm-new', container: 'compute', vmiUid: 'vmi-new' });
  t.same(vms.vmiPod('elsewhere', 'testvm').name, 'virt-launcher-testvm-else', 'by namespace');
  t.throws(() => vms.vmiPod('ns', 'other'), {
    kind: 'NotFound',
    message: 'virtualmachineinstance ns/other has no launcher pod on this node',
  });
  t.throws(() => vms.vmiPod('tenant', 'testvm'), { message: /no launcher pod/ }, 'a pod that only carries the labels is no VMI pod');
});

// The node side of KubeVirt compatibility on the real control plane: a
// launcher pod owned by a VirtualMachineInstance is realized from the VMI's
// spec, the VMI gets this node's status, and deleting the VMI lets the real
// garbage collector remove the pod, which stops the VM. The launcher pod is
// made by hand here, as the cluster-side VMI controller makes it.
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { condition, qemuPids, startAgent, startTestCluster, waitFor } from './harness.js';
import { smokeVmiSpec } from './kubevirt-fixtures.js';

const NODE = 'vkvm-e2e-vmi';
const NS = 'e2e-vmi';
const API = { group: 'kubevirt.io', version: 'v1', namespace: NS, plural: 'virtualmachineinstances' };
/** This test's QEMU processes: its domains are named <namespace>_<vmi> (their -uuid is the VMI's firmware UUID, not the pod's). */
const testQemuPids = (): number[] => qemuPids((argv) => argv.some((a) => a.includes(`guest=${NS}_`)));

/** The smoke VM's VMI, plus a watchdog vkvm does not realize: preserved by the CRD and reported. */
function vmi(name: string): VirtualMachineInstance {
  const spec = smokeVmiSpec();
  Object.assign(spec.domain.devices!, { watchdog: { name: 'wd', i6300esb: { action: 'poweroff' } } });
  return { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name, namespace: NS }, spec };
}

t.test('a VMI launcher pod runs the VMI on the node', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  await startAgent(t, cluster, { nodeName: NODE });
  await cluster.clients.core.createNamespace({ body: { metadata: { name: NS } } });
  const custom = cluster.clients.custom;

  const created = (await custom.createNamespacedCustomObject({ ...API, body: vmi('testvmi') })) as VirtualMachineInstance;
  const pod: V1Pod = {
    metadata: {
      name: 'virt-launcher-testvmi-e2e01',
      namespace: NS,
      labels: { 'kubevirt.io': 'virt-launcher', 'kubevirt.io/created-by': created.metadata.uid! },
      ownerReferences: [
        {
          apiVersion: 'kubevirt.io/v1',
          kind: 'VirtualMachineInstance',
          name: 'testvmi',
          uid: created.metadata.uid!,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      nodeSelector: { 'kubevirt.io/schedulable': 'true' },
      tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
      restartPolicy: 'Never',
      containers: [{ name: 'compute', image: 'vkvm/vmi', resources: { requests: { cpu: '100m', memory: '256Mi' } } }],
    },
  };
  await cluster.clients.core.createNamespacedPod({ namespace: NS, body: pod });

  const running = await waitFor(
    'VMI Running and Ready',
    async () => (await custom.getNamespacedCustomObject({ ...API, name: 'testvmi' })) as VirtualMachineInstance,
    (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True',
    { timeoutMs: 180_000 },
  );
  t.match(
    running.status,
    {
      phase: 'Running',
      nodeName: NODE,
      phaseTransitionTimestamps: [{ phase: 'Running' }],
      conditions: [
        { type: 'Ready', status: 'True' },
        { type: 'UnsupportedFields', status: 'True', message: /spec\.domain\.devices\.watchdog/ },
      ],
    },
    'the node writes phase, nodeName, Ready and the unsupported fields (no Paused condition while running, as KubeVirt)',
  );
  const events = await waitFor(
    'the UnsupportedFields event on the VMI',
    async () =>
      (await cluster.clients.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${created.metadata.uid}` }))
        .items,
    (es) => es.some((e) => e.reason === 'UnsupportedFields'),
  );
  t.match(
    events.find((e) => e.reason === 'UnsupportedFields'),
    { type: 'Warning', involvedObject: { kind: 'VirtualMachineInstance', name: 'testvmi' }, message: /spec\.domain\.devices\.watchdog/ },
    'a Warning event on the VMI names the unsupported field',
  );
  t.ok(testQemuPids().length > 0, 'QEMU runs for the launcher pod');
  const table = await cluster.kubectl(['get', 'vmi', '-n', NS]);
  t.match(
    table.stdout,
    new RegExp(`^testvmi\\s+\\S+\\s+Running\\s+\\d+\\.\\d+\\.\\d+\\.\\d+\\s+${NODE}\\s+True`, 'm'),
    'kubectl get vmi fills PHASE, IP, NODENAME and READY',
  );

  await custom.deleteNamespacedCustomObject({ ...API, name: 'testvmi' });
  await waitFor(
    'launcher pod collected and QEMU gone',
    async () => ({
      pods: (await cluster.clients.core.listNamespacedPod({ namespace: NS })).items.length,
      qemu: testQemuPids().length > 0,
    }),
    (s) => s.pods === 0 && !s.qemu,
    { timeoutMs: 90_000 },
  );
  t.pass('deleting the VMI lets the garbage collector delete the pod, and the VM stops with it');
});

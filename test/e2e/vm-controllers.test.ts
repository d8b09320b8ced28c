// The cluster-wide VM/VMI controllers on the real control plane, without a
// node agent (the node side has its own e2e): a VirtualMachine's run strategy
// creates and deletes its VMI, each VMI gets a virt-launcher pod the real
// scheduler sees, and the real garbage collector removes VMIs and pods with
// their owners. With no node the launcher pod stays Unschedulable.
import t from 'tap';
import { CustomObjectsApi, type CoreV1Event, type V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { mergePatch } from '../../provider/kube/client.js';
import { isNotFound } from '../../provider/kube/errors.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { FIXED_OVERHEAD_MIB, PER_VCPU_OVERHEAD_MIB } from '../../launcher/limits.js';
import { startTestCluster, testLog, waitFor } from './harness.js';

const NS = 'e2e-vm-controllers';
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS };

const testVm = (name: string): VirtualMachine => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachine',
  metadata: { name, namespace: NS },
  spec: {
    runStrategy: 'Always',
    template: {
      metadata: { labels: { 'kubevirt.io/size': 'small' } },
      spec: {
        domain: {
          resources: { requests: { memory: '128Mi', cpu: '200m' } },
          devices: { disks: [{ name: 'containerdisk', disk: { bus: 'virtio' } }] },
        },
        nodeSelector: { 'vkvm.io/pool': 'e2e' },
        tolerations: [{ key: 'dedicated', operator: 'Exists', effect: 'NoSchedule' }],
        volumes: [{ name: 'containerdisk', containerDisk: { image: 'quay.io/kubevirt/cirros-container-disk-demo' } }],
      },
    },
  },
});

t.test('VMs become VMIs and launcher pods, and go with them', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  await cluster.clients.core.createNamespace({ body: { metadata: { name: NS } } });
  const custom = cluster.clients.kc.makeApiClient(CustomObjectsApi);
  // Pods are refused until the namespace's default ServiceAccount exists (the controller would retry; the test wants one clean pass).
  await waitFor(
    'the default ServiceAccount',
    () => cluster.clients.core.readNamespacedServiceAccount({ name: 'default', namespace: NS }),
    () => true,
  );

  const readVm = async (name: string) =>
    (await custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name })) as VirtualMachine;
  const readVmi = async (name: string): Promise<VirtualMachineInstance | undefined> => {
    try {
      return (await custom.getNamespacedCustomObject({ ...KV, plural: 'virtualmachineinstances', name })) as VirtualMachineInstance;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
  const launcherPods = async (): Promise<V1Pod[]> =>
    (await cluster.clients.core.listNamespacedPod({ namespace: NS, labelSelector: 'kubevirt.io=virt-launcher' })).items;
  const setRunStrategy = (name: string, runStrategy: string) =>
    custom.patchNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name, body: { spec: { runStrategy } } }, mergePatch);

  const vm = (await custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: testVm('testvm') })) as VirtualMachine;

  const vmi = await waitFor(
    'the VMI of testvm',
    () => readVmi('testvm'),
    (v) => Boolean(v),
  );
  t.match(
    vmi!.metadata,
    {
      name: 'testvm',
      labels: { 'kubevirt.io/size': 'small', 'kubevirt.io/vm': 'testvm' },
      ownerReferences: [
        {
          apiVersion: 'kubevirt.io/v1',
          kind: 'VirtualMachine',
          name: 'testvm',
          uid: vm.metadata.uid,
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    'runStrategy Always creates the VMI, owned by the VM',
  );

  const [pod] = await waitFor('the launcher pod of testvm', launcherPods, (pods) => pods.length > 0);
  t.match(
    pod,
    {
      metadata: {
        name: /^virt-launcher-testvm-[a-z0-9]{5}$/,
        labels: { 'kubevirt.io': 'virt-launcher', 'kubevirt.io/created-by': vmi!.metadata.uid, 'vm.kubevirt.io/name': 'testvm' },
        annotations: { 'kubevirt.io/domain': 'testvm' },
        ownerReferences: [
          {
            apiVersion: 'kubevirt.io/v1',
            kind: 'VirtualMachineInstance',
            name: 'testvm',
            uid: vmi!.metadata.uid,
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      spec: {
        nodeSelector: { 'vkvm.io/pool': 'e2e', 'kubevirt.io/schedulable': 'true' },
        tolerations: [
          { key: 'dedicated', operator: 'Exists', effect: 'NoSchedule' },
          { key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' },
        ],
        terminationGracePeriodSeconds: 30,
        restartPolicy: 'Never',
        containers: [
          {
            name: 'compute',
            image: 'quay.io/kubevirt/cirros-container-disk-demo',
            resources: { requests: { memory: `${128 + 2 + FIXED_OVERHEAD_MIB + PER_VCPU_OVERHEAD_MIB}Mi`, cpu: '200m' } },
          },
        ],
      },
    },
    'the VMI gets one launcher pod with its owner, labels, node selector, toleration and requests',
  );

  const scheduling = await waitFor(
    'VMI Scheduling with the pod unschedulable',
    () => readVmi('testvm'),
    (v) =>
      v?.status?.phase === 'Scheduling' &&
      Boolean(v.status.conditions?.some((c) => c.type === 'PodScheduled' && c.reason === 'Unschedulable')),
  );
  t.same(
    scheduling!.status!.phaseTransitionTimestamps?.map((p) => p.phase),
    ['Scheduling'],
    'VMI phase Scheduling, straight from none',
  );
  const unschedulable = await waitFor(
    'VM ErrorUnschedulable',
    () => readVm('testvm'),
    (v) => v.status?.printableStatus === 'ErrorUnschedulable',
  );
  t.match(
    unschedulable.status,
    { printableStatus: 'ErrorUnschedulable', created: true, ready: false, runStrategy: 'Always' },
    'no node: the VM shows ErrorUnschedulable',
  );
  t.equal((await launcherPods()).length, 1, 'still one launcher pod after the VMI was synced again');

  await setRunStrategy('testvm', 'Halted');
  await waitFor(
    'the VMI deleted',
    () => readVmi('testvm'),
    (v) => v === undefined,
  );
  await waitFor('the launcher pod garbage-collected', launcherPods, (pods) => pods.length === 0);
  const halted = await waitFor(
    'VM Stopped',
    () => readVm('testvm'),
    (v) => v.status?.printableStatus === 'Stopped',
  );
  t.match(
    halted.status,
    { printableStatus: 'Stopped', created: false, ready: false, runStrategy: 'Halted' },
    'runStrategy Halted removes the VMI and its pod',
  );

  await setRunStrategy('testvm', 'Always');
  const again = await waitFor(
    'a new VMI',
    () => readVmi('testvm'),
    (v) => Boolean(v) && v!.metadata.uid !== vmi!.metadata.uid,
  );
  const [secondPod] = await waitFor(
    'its launcher pod',
    launcherPods,
    (pods) => pods.length === 1 && pods[0]!.metadata?.labels?.['kubevirt.io/created-by'] === again!.metadata.uid,
  );

  const describe = (e: CoreV1Event) =>
    `${e.involvedObject.kind} ${e.involvedObject.uid} ${e.type} ${e.reason} x${e.count} (${e.source?.component}): ${e.message}`;
  const expected = [
    `VirtualMachine ${vm.metadata.uid} Normal SuccessfulCreate x2 (virtualmachine-controller): Started the virtual machine by creating the new virtual machine instance testvm`,
    `VirtualMachine ${vm.metadata.uid} Normal SuccessfulDelete x1 (virtualmachine-controller): Stopped the virtual machine by deleting the virtual machine instance ${vmi!.metadata.uid}`,
    `VirtualMachineInstance ${vmi!.metadata.uid} Normal SuccessfulCreate x1 (virtualmachineinstance-controller): Created virtual machine pod ${pod!.metadata!.name}`,
    `VirtualMachineInstance ${again!.metadata.uid} Normal SuccessfulCreate x1 (virtualmachineinstance-controller): Created virtual machine pod ${secondPod!.metadata!.name}`,
  ].sort();
  const events = await waitFor(
    'the controllers’ events',
    async () =>
      (await cluster.clients.core.listNamespacedEvent({ namespace: NS })).items
        .filter((e) => e.source?.component?.startsWith('virtualmachine'))
        .map(describe)
        .sort(),
    (es) => es.length === expected.length && es.join() === expected.join(),
    { timeoutMs: 15_000 },
  );
  t.same(events, expected, 'Events on the VM and its VMIs as KubeVirt records them');

  await custom.deleteNamespacedCustomObject({ ...KV, plural: 'virtualmachines', name: 'testvm' });
  await waitFor(
    'the VMI garbage-collected',
    () => readVmi('testvm'),
    (v) => v === undefined,
  );
  await waitFor('the launcher pod garbage-collected', launcherPods, (pods) => pods.length === 0);
  t.pass('deleting the VM removes its VMI and launcher pod');

  const typed = testVm('instancetyped');
  Object.assign(typed.spec, { runStrategy: 'Halted', instancetype: { name: 'u1.small' } });
  const withInstancetype = (await custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: typed })) as VirtualMachine;
  const reported = await waitFor(
    'the UnsupportedFields condition',
    () => readVm('instancetyped'),
    (v) => Boolean(v.status?.conditions?.some((c) => c.type === 'UnsupportedFields')),
  );
  t.match(
    reported.status?.conditions?.find((c) => c.type === 'UnsupportedFields'),
    { status: 'True', reason: 'Ignored', message: 'vkvm does not realize: spec.instancetype' },
    'a VM field vkvm keeps but does not realize is named by a condition',
  );
  const warnings = await waitFor(
    'the UnsupportedFields event',
    async () =>
      (
        await cluster.clients.core.listNamespacedEvent({
          namespace: NS,
          fieldSelector: `involvedObject.uid=${withInstancetype.metadata.uid}`,
        })
      ).items,
    (es) => es.some((e) => e.reason === 'UnsupportedFields'),
  );
  t.match(
    warnings.find((e) => e.reason === 'UnsupportedFields'),
    { type: 'Warning', message: /spec\.instancetype/ },
    'and by a Warning event on the VM',
  );

  // runStrategy Manual, started and stopped with the kubectl commands README.md gives for virtctl start/stop.
  const manual = testVm('manual');
  manual.spec.runStrategy = 'Manual';
  await custom.createNamespacedCustomObject({ ...KV, plural: 'virtualmachines', body: manual });
  await waitFor(
    'Manual VM Stopped',
    () => readVm('manual'),
    (v) => v.status?.printableStatus === 'Stopped',
  );
  t.equal(await readVmi('manual'), undefined, 'runStrategy Manual starts nothing by itself');
  const request = (body: object) =>
    cluster.kubectl([
      'patch',
      'vm',
      'manual',
      '-n',
      NS,
      '--subresource=status',
      '--type',
      'merge',
      '-p',
      JSON.stringify({ status: { stateChangeRequests: [body] } }),
    ]);
  t.equal((await request({ action: 'Start' })).code, 0, 'a Start request is patched into the status');
  const started = await waitFor(
    'the Manual VM’s VMI',
    () => readVmi('manual'),
    (v) => Boolean(v),
  );
  const consumed = await waitFor(
    'the Start request consumed',
    () => readVm('manual'),
    (v) => !v.status?.stateChangeRequests,
  );
  t.match(consumed.status, { created: true }, 'the Start request created the VMI and was consumed');
  t.equal((await request({ action: 'Stop', uid: started!.metadata.uid })).code, 0, 'a Stop request for that VMI is patched in');
  await waitFor(
    'the Manual VM’s VMI deleted',
    () => readVmi('manual'),
    (v) => v === undefined,
  );
  const stopped = await waitFor(
    'Manual VM Stopped again',
    () => readVm('manual'),
    (v) => v.status?.printableStatus === 'Stopped' && !v.status.stateChangeRequests,
  );
  t.match(stopped.status, { printableStatus: 'Stopped', created: false }, 'the Stop request deleted the VMI and was dropped');
});

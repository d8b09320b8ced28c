// The cluster-wide VM/VMI controllers on the real control plane, without a
// node agent (the node side has its own e2e): a VirtualMachine's run strategy
// creates and deletes its VMI, each VMI gets a virt-launcher pod the real
// scheduler sees, and the real garbage collector removes VMIs and pods with
// their owners. With no node the launcher pod stays Unschedulable. A VMI
// whose volumes have no disks gets KubeVirt's default disks first.
import t from 'tap';
import type { CoreV1Event } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { FIXED_OVERHEAD_MIB, GRAPHICS_OVERHEAD_MIB, PER_VCPU_OVERHEAD_MIB } from '../../launcher/limits.js';
import {
  kubevirtIn,
  pooledVm,
  smokeVmiSpec,
  startTestCluster,
  testLog,
  testNamespace,
  vmiOf,
  waitFor,
  waitForAll,
  waitForGone,
  events as eventsIn,
} from './framework/index.js';

const NS = 'e2e-vm-controllers';
const LAUNCHER_PODS = { labelSelector: 'kubevirt.io=virt-launcher' };

t.test('VMs become VMIs and launcher pods, and go with them', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  // Pods are refused until the namespace's default ServiceAccount exists (the controller would retry; the test wants one clean pass).
  const ns = await testNamespace(t, cluster, NS);
  const kv = kubevirtIn(ns);
  const launcherPods = async () => (await cluster.clients.core.listNamespacedPod({ namespace: NS, ...LAUNCHER_PODS })).items;
  const setRunStrategy = (name: string, runStrategy: string) => kv.patchVm(name, { spec: { runStrategy } });

  await t.test(
    'runStrategy Always creates a VMI and its launcher pod; Halted removes them; deleting the VM takes them along',
    async (t) => {
      const vm = await kv.createVm(pooledVm('testvm'));

      const vmi = await waitFor(ns.vmi('testvm'), () => true, { what: 'created' });
      t.match(
        vmi.metadata,
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

      const pod = await waitFor(ns.pods(LAUNCHER_PODS), () => true, { what: 'the launcher pod of testvm' });
      t.match(
        pod,
        {
          metadata: {
            name: /^virt-launcher-testvm-[a-z0-9]{5}$/,
            labels: { 'kubevirt.io': 'virt-launcher', 'kubevirt.io/created-by': vmi.metadata.uid, 'vm.kubevirt.io/name': 'testvm' },
            annotations: { 'kubevirt.io/domain': 'testvm' },
            ownerReferences: [
              {
                apiVersion: 'kubevirt.io/v1',
                kind: 'VirtualMachineInstance',
                name: 'testvm',
                uid: vmi.metadata.uid,
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
                // Every VM has a VNC display unless autoattachGraphicsDevice is false: its video memory is requested too.
                resources: {
                  requests: { memory: `${128 + 2 + FIXED_OVERHEAD_MIB + PER_VCPU_OVERHEAD_MIB + GRAPHICS_OVERHEAD_MIB}Mi`, cpu: '200m' },
                },
              },
            ],
          },
        },
        'the VMI gets one launcher pod with its owner, labels, node selector, toleration and requests',
      );

      const scheduling = await waitFor(
        ns.vmi('testvm'),
        (v) =>
          v.status?.phase === 'Scheduling' &&
          Boolean(v.status.conditions?.some((c) => c.type === 'PodScheduled' && c.reason === 'Unschedulable')),
        { what: 'Scheduling with the pod unschedulable' },
      );
      t.same(
        scheduling.status!.phaseTransitionTimestamps?.map((p) => p.phase),
        ['Scheduling'],
        'VMI phase Scheduling, straight from none',
      );
      const unschedulable = await waitFor(ns.vm('testvm'), (v) => v.status?.printableStatus === 'ErrorUnschedulable', {
        what: 'ErrorUnschedulable',
      });
      t.match(
        unschedulable.status,
        { printableStatus: 'ErrorUnschedulable', created: true, ready: false, runStrategy: 'Always' },
        'no node: the VM shows ErrorUnschedulable',
      );
      t.equal((await launcherPods()).length, 1, 'still one launcher pod after the VMI was synced again');

      await setRunStrategy('testvm', 'Halted');
      await waitForGone(ns.vmi('testvm'));
      await waitForGone(ns.pods(LAUNCHER_PODS), { what: 'garbage-collected' });
      const halted = await waitFor(ns.vm('testvm'), (v) => v.status?.printableStatus === 'Stopped', { what: 'Stopped' });
      t.match(
        halted.status,
        { printableStatus: 'Stopped', created: false, ready: false, runStrategy: 'Halted' },
        'runStrategy Halted removes the VMI and its pod',
      );

      await setRunStrategy('testvm', 'Always');
      const again = await waitFor(ns.vmi('testvm'), (v) => v.metadata.uid !== vmi.metadata.uid, { what: 'a new VMI' });
      const [secondPod] = await waitForAll(
        ns.pods(LAUNCHER_PODS),
        (pods) => pods.length === 1 && pods[0]!.metadata?.labels?.['kubevirt.io/created-by'] === again.metadata.uid,
        {
          what: 'one launcher pod, of the new VMI',
        },
      );

      const describe = (e: CoreV1Event) =>
        `${e.involvedObject.kind} ${e.involvedObject.uid} ${e.type} ${e.reason} x${e.count} (${e.source?.component}): ${e.message}`;
      const expected = [
        `VirtualMachine ${vm.metadata.uid} Normal SuccessfulCreate x2 (virtualmachine-controller): Started the virtual machine by creating the new virtual machine instance testvm`,
        `VirtualMachine ${vm.metadata.uid} Normal SuccessfulDelete x1 (virtualmachine-controller): Stopped the virtual machine by deleting the virtual machine instance ${vmi.metadata.uid}`,
        `VirtualMachineInstance ${vmi.metadata.uid} Normal SuccessfulCreate x1 (virtualmachineinstance-controller): Created virtual machine pod ${pod.metadata!.name}`,
        `VirtualMachineInstance ${again.metadata.uid} Normal SuccessfulCreate x1 (virtualmachineinstance-controller): Created virtual machine pod ${secondPod!.metadata!.name}`,
      ].sort();
      const fromControllers = (es: CoreV1Event[]) => es.filter((e) => e.source?.component?.startsWith('virtualmachine'));
      // Waited for: an event on each object, the VM's creations counted twice. Asserted: all of them, as recorded.
      const events = await waitForAll(
        eventsIn(cluster.clients, NS),
        (es) => {
          const got = fromControllers(es);
          const has = (uid: string | undefined, reason: string, count = 1) =>
            got.some((e) => e.involvedObject.uid === uid && e.reason === reason && (e.count ?? 1) >= count);
          return (
            has(vm.metadata.uid, 'SuccessfulCreate', 2) &&
            has(vm.metadata.uid, 'SuccessfulDelete') &&
            has(vmi.metadata.uid, 'SuccessfulCreate') &&
            has(again.metadata.uid, 'SuccessfulCreate')
          );
        },
        { what: 'the controllers’ events', deadlineMs: 15_000 },
      );
      t.same(fromControllers(events).map(describe).sort(), expected, 'Events on the VM and its VMIs as KubeVirt records them');

      await kv.deleteVm('testvm');
      await waitForGone(ns.vmi('testvm'), { what: 'garbage-collected' });
      await waitForGone(ns.pods(LAUNCHER_PODS), { what: 'garbage-collected' });
      t.same(
        { vm: await kv.readVm('testvm'), vmi: await kv.readVmi('testvm'), pods: await launcherPods() },
        { vm: undefined, vmi: undefined, pods: [] },
        'deleting the VM removes its VMI and launcher pod, and nothing makes them again',
      );
    },
  );

  await t.test("a running VM's template change shows RestartRequired until its next VMI runs the template as it is", async (t) => {
    await kv.createVm(pooledVm('restartvm'));
    const first = await waitFor(ns.vmi('restartvm'), () => true, { what: 'created' });
    const restartRequired = (v: { status?: { conditions?: Array<{ type: string }> } }) =>
      v.status?.conditions?.find((c) => c.type === 'RestartRequired');
    await kv.patchVm('restartvm', { spec: { template: { spec: { domain: { resources: { requests: { memory: '256Mi' } } } } } } });
    const flagged = await waitFor(ns.vm('restartvm'), (v) => Boolean(restartRequired(v)), { what: 'the RestartRequired condition' });
    t.match(
      restartRequired(flagged),
      { status: 'True', message: 'a non-live-updatable field was changed in the template spec' },
      "KubeVirt's condition and message on the VM",
    );
    t.equal((await kv.readVmi('restartvm'))?.metadata.uid, first.metadata.uid, 'the running VMI is left as it is');
    // virtctl restart's effect, as runStrategy Always does it: the VMI goes and the next one is made from the template.
    await kv.deleteVmi('restartvm');
    const next = await waitFor(ns.vmi('restartvm'), (v) => v.metadata.uid !== first.metadata.uid, { what: 'the next VMI' });
    t.match(next.spec.domain?.resources, { requests: { memory: '256Mi' } }, 'the next VMI runs the changed template');
    const cleared = await waitFor(ns.vm('restartvm'), (v) => !restartRequired(v), { what: 'RestartRequired cleared' });
    t.notOk(restartRequired(cleared), 'and the condition is gone');
    await kv.deleteVm('restartvm');
  });

  await t.test('a VM field vkvm keeps but does not realize is reported by a condition and an event', async (t) => {
    const typed = pooledVm('instancetyped');
    // A field KubeVirt has and vkvm keeps (the VM spec preserves unknown fields) but does not realize.
    Object.assign(typed.spec, { runStrategy: 'Halted', updateVolumesStrategy: 'Migration' });
    const unrealized = await kv.createVm(typed);
    const reported = await waitFor(
      ns.vm('instancetyped'),
      (v) => Boolean(v.status?.conditions?.some((c) => c.type === 'UnsupportedFields')),
      { what: 'the UnsupportedFields condition' },
    );
    t.match(
      reported.status?.conditions?.find((c) => c.type === 'UnsupportedFields'),
      { status: 'True', reason: 'Ignored', message: 'vkvm does not realize: spec.updateVolumesStrategy' },
      'a VM field vkvm keeps but does not realize is named by a condition',
    );
    const warning = await waitFor(ns.eventsOf(unrealized.metadata.uid!), (e) => e.reason === 'UnsupportedFields', {
      what: 'the UnsupportedFields event',
    });
    t.match(warning, { type: 'Warning', message: /spec\.updateVolumesStrategy/ }, 'and by a Warning event on the VM');
  });

  await t.test("a VMI's volumes without a disk get KubeVirt's default SATA disks in its spec, before its launcher pod", async (t) => {
    const spec = smokeVmiSpec();
    spec.domain.devices = { interfaces: spec.domain.devices!.interfaces! };
    await kv.createVmi(vmiOf('diskless', spec));
    const defaulted = await waitFor(ns.vmi('diskless'), (v) => (v.spec.domain.devices?.disks?.length ?? 0) > 0, {
      what: 'disks in its spec',
    });
    const pods = await waitFor(ns.pods({ labelSelector: 'vm.kubevirt.io/name=diskless' }), () => true, { what: 'its launcher pod' });
    t.same(
      { disks: defaulted.spec.domain.devices?.disks, pod: Boolean(pods.metadata?.name) },
      {
        disks: [
          { name: 'containerdisk', disk: { bus: 'sata' } },
          { name: 'emptydisk', disk: { bus: 'sata' } },
          { name: 'cloudinitdisk', disk: { bus: 'sata' } },
        ],
        pod: true,
      },
      'one SATA disk per volume, in volume order, and then the launcher pod',
    );
    await kv.deleteVmi('diskless');
    await waitForGone(ns.vmi('diskless'));
  });

  await t.test('runStrategy Manual starts and stops by the state change requests kubectl patches in', async (t) => {
    // Started and stopped with the kubectl commands README.md gives for virtctl start/stop.
    const manual = pooledVm('manual');
    manual.spec.runStrategy = 'Manual';
    await kv.createVm(manual);
    await waitFor(ns.vm('manual'), (v) => v.status?.printableStatus === 'Stopped', { what: 'Stopped' });
    t.equal(await kv.readVmi('manual'), undefined, 'runStrategy Manual starts nothing by itself');
    const request = (body: object) =>
      ns.kubectl([
        'patch',
        'vm',
        'manual',
        '--subresource=status',
        '--type',
        'merge',
        '-p',
        JSON.stringify({ status: { stateChangeRequests: [body] } }),
      ]);
    t.equal((await request({ action: 'Start' })).code, 0, 'a Start request is patched into the status');
    const started = await waitFor(ns.vmi('manual'), () => true, { what: 'created' });
    const consumed = await waitFor(ns.vm('manual'), (v) => !v.status?.stateChangeRequests, { what: 'the Start request consumed' });
    t.match(consumed.status, { created: true }, 'the Start request created the VMI and was consumed');
    t.equal((await request({ action: 'Stop', uid: started.metadata.uid })).code, 0, 'a Stop request for that VMI is patched in');
    await waitForGone(ns.vmi('manual'));
    const stopped = await waitFor(ns.vm('manual'), (v) => v.status?.printableStatus === 'Stopped' && !v.status.stateChangeRequests, {
      what: 'Stopped again',
    });
    t.match(stopped.status, { printableStatus: 'Stopped', created: false }, 'the Stop request deleted the VMI and was dropped');
  });
});

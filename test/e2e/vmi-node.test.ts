// The node side of KubeVirt compatibility on the real control plane: a
// launcher pod owned by a VirtualMachineInstance is realized from the VMI's
// spec, the VMI gets this node's status, and deleting the VMI lets the real
// garbage collector remove the pod, which stops the VM. The launcher pod is
// made by hand here, as the cluster-side VMI controller makes it.
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { launcherMemoryRequestMiB } from '../../provider/controllers/launcher-pod.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import {
  condition,
  kubevirtIn,
  poll,
  qemuPidsOfDomain,
  startAgent,
  startTestCluster,
  testNamespace,
  VKVM_TOLERATION,
  vmiOf,
  waitFor,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-vmi';
const NS = 'e2e-vmi';
/** This test's QEMU processes: its domains are named <namespace>_<vmi> (their -uuid is the VMI's firmware UUID, not the pod's). */
const testQemuPids = (): number[] => qemuPidsOfDomain(`${NS}_`);

/** A port the test guest serves only once the test starts a server there. */
const PROBED_PORT = 8081;

/**
 * The smoke VM's VMI, plus a watchdog vkvm does not realize (preserved by the CRD and reported), and a
 * readiness probe on a port the guest does not serve until told to.
 */
function vmi(name: string): VirtualMachineInstance {
  const v = vmiOf(name);
  Object.assign(v.spec.domain.devices!, { watchdog: { name: 'wd', i6300esb: { action: 'poweroff' } } });
  Object.assign(v.spec, { readinessProbe: { tcpSocket: { port: PROBED_PORT }, periodSeconds: 2 } });
  return v;
}

t.test('a VMI launcher pod runs the VMI on the node', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const kv = kubevirtIn(ns);

  const created = await kv.createVmi(vmi('testvmi'));
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
      tolerations: [VKVM_TOLERATION],
      restartPolicy: 'Never',
      containers: [
        {
          name: 'compute',
          image: 'vkvm/vmi',
          resources: { requests: { cpu: '100m', memory: `${launcherMemoryRequestMiB(created, 'tcg')}Mi` } },
        },
      ],
    },
  };
  await ns.createPod(pod);
  await cluster.clients.core.createNamespacedService({
    namespace: NS,
    body: {
      metadata: { name: 'probed' },
      spec: { selector: { 'kubevirt.io/created-by': created.metadata.uid! }, ports: [{ port: PROBED_PORT }] },
    },
  });
  const endpointReady = async () =>
    (
      await ns.kubectl([
        'get',
        'endpointslices',
        '-l',
        'kubernetes.io/service-name=probed',
        '-o',
        'jsonpath={.items[*].endpoints[*].conditions.ready}',
      ])
    ).stdout;

  // The guest is up (its web server answers on 80, through the guest agent), but not on the probed port.
  await poll(
    'the guest serves on 80',
    () => ns.kubectl(['exec', pod.metadata!.name!, '--', '/bin/wget', '-q', '-O', '-', 'http://127.0.0.1/'], { timeoutMs: 30_000 }),
    (r) => r.code === 0,
    { deadlineMs: 240_000, intervalMs: 2000 },
  );
  const probing = await waitFor(ns.vmi('testvmi'), (v) => v.status?.phase === 'Running', { what: 'Running' });
  t.equal(condition(probing, 'Ready'), 'False', 'running and booted, but not Ready while its readiness probe fails');
  t.equal(await endpointReady(), 'false', "so its Service's endpoint is not ready");
  const podUid = (await ns.readPod(pod.metadata!.name!)).metadata!.uid!;
  // Earlier failures name what stood in the way while the guest booted (no route yet, a timeout); now the port is closed.
  const refused = await waitFor(
    ns.eventsOf(podUid),
    (e) => e.reason === 'Unhealthy' && (e.message ?? '').includes(`:${PROBED_PORT}: ECONNREFUSED`),
    { what: 'the Unhealthy event of a refused connection' },
  ).catch((err: Error) => err.message);
  t.match(
    typeof refused === 'string' ? refused : refused.message,
    new RegExp(`^Readiness probe failed: dial tcp [\\d.]+:${PROBED_PORT}: ECONNREFUSED$`),
    'each failure says why',
  );
  await ns.kubectl(['exec', pod.metadata!.name!, '--', '/bin/httpd', '-p', String(PROBED_PORT), '-h', '/www']);

  const running = await waitFor(ns.vmi('testvmi'), (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
    what: 'Running and Ready',
    deadlineMs: 180_000,
  });
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
  t.equal(await endpointReady(), 'true', 'once the guest serves the probed port the VMI is Ready, and so is its endpoint');
  const event = await waitFor(ns.eventsOf(created.metadata.uid!), (e) => e.reason === 'UnsupportedFields', {
    what: 'the UnsupportedFields event',
  });
  t.match(
    event,
    { type: 'Warning', involvedObject: { kind: 'VirtualMachineInstance', name: 'testvmi' }, message: /spec\.domain\.devices\.watchdog/ },
    'a Warning event on the VMI names the unsupported field',
  );
  t.ok(testQemuPids().length > 0, 'QEMU runs for the launcher pod');
  const table = await ns.kubectl(['get', 'vmi']);
  t.match(
    table.stdout,
    new RegExp(`^testvmi\\s+\\S+\\s+Running\\s+\\d+\\.\\d+\\.\\d+\\.\\d+\\s+${NODE}\\s+True`, 'm'),
    'kubectl get vmi fills PHASE, IP, NODENAME and READY',
  );

  await kv.deleteVmi('testvmi');
  await waitForGone(ns.pods(), { what: 'the launcher pod garbage-collected', deadlineMs: 90_000 });
  await poll(
    'QEMU gone',
    async () => testQemuPids(),
    (pids) => pids.length === 0,
    { deadlineMs: 90_000 },
  ).catch(() => undefined);
  t.same(
    {
      vmi: await kv.readVmi('testvmi'),
      pods: (await cluster.clients.core.listNamespacedPod({ namespace: NS })).items,
      qemu: testQemuPids(),
    },
    { vmi: undefined, pods: [], qemu: [] },
    'deleting the VMI lets the garbage collector delete the pod, and the VM stops with it',
  );
});

// DaemonSets on a vkvm node, as a tenant (`edit` in one namespace) makes
// them: one that reaches the node only by tolerating every taint (as
// kube-proxy's, flannel's and node-exporter's manifests do) is not a VM — its
// pod fails NotAVirtualMachine with one event, before any pull, with nothing
// made for it — while one meant for vkvm nodes (the vkvm taint tolerated by
// key) runs its pod as a VM; `kubectl drain --ignore-daemonsets` passes them.
import { AppsV1Api, type V1DaemonSet, type V1Pod } from '@kubernetes/client-node';
import t from 'tap';
import { installClusterManifests } from '../../provider/cli/up.js';
import {
  createTenant,
  hostTracesOf,
  NO_TRACES,
  poll,
  pods,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  TEST_GUEST_IMAGE,
  testNamespace,
  VKVM_TOLERATION,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-ds';
const NS = 'e2e-daemonsets';

function daemonSet(name: string, image: string, spec: Partial<NonNullable<V1Pod['spec']>>): V1DaemonSet {
  return {
    metadata: { name, namespace: NS },
    spec: {
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: { containers: [{ name, image, resources: { limits: { memory: '128Mi' } } }], terminationGracePeriodSeconds: 5, ...spec },
      },
    },
  };
}

t.test('a DaemonSet that tolerates every taint is not a VM on a vkvm node; one meant for vkvm nodes is', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const apps = tenant.kc.makeApiClient(AppsV1Api);
  const agent = await startAgent(t, cluster, { nodeName: NODE });

  // kube-proxy's toleration; an image at a registry that does not exist, so a pull would show as ErrImagePull.
  await apps.createNamespacedDaemonSet({
    namespace: NS,
    body: daemonSet('addon', 'registry.invalid/addon:v1', { tolerations: [{ operator: 'Exists' }] }),
  });
  const refused = await waitFor(pods(tenant, NS, { labelSelector: 'app=addon' }), (p) => p.status?.phase === 'Failed', {
    what: 'the add-on pod Failed',
    deadlineMs: 60_000,
  });
  const events = await poll(
    'the NotAVirtualMachine event',
    () => tenant.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${refused.metadata!.uid}` }),
    (list) => list.items.some((e) => e.reason === 'NotAVirtualMachine'),
    { deadlineMs: 30_000 },
  ).catch(() => tenant.core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.uid=${refused.metadata!.uid}` }));
  t.match(
    {
      node: refused.spec?.nodeName,
      status: { phase: refused.status?.phase, reason: refused.status?.reason, message: refused.status?.message },
      // The scheduler's "Scheduled" aside: the node's own.
      events: events.items.filter((e) => e.reason !== 'Scheduled').map((e) => ({ type: e.type, reason: e.reason, message: e.message })),
      left: await hostTracesOf(agent, refused.metadata!.uid!),
    },
    {
      node: NODE,
      status: {
        phase: 'Failed',
        reason: 'NotAVirtualMachine',
        message: /^Pod was rejected: a pod of DaemonSet addon reaches this vkvm node only by tolerating every taint; vkvm runs/,
      },
      events: [{ type: 'Warning', reason: 'NotAVirtualMachine', message: /DaemonSet addon/ }],
      left: NO_TRACES,
    },
    'refused as the kubelet refuses a pod it cannot run: Failed, its reason, one event, no pull, nothing made',
  );

  // Meant for vkvm nodes: the vkvm taint tolerated by its key.
  await apps.createNamespacedDaemonSet({ namespace: NS, body: daemonSet('vms', TEST_GUEST_IMAGE, { tolerations: [VKVM_TOLERATION] }) });
  const vm = await waitFor(pods(tenant, NS, { labelSelector: 'app=vms' }), (p) => p.status?.phase === 'Running', {
    what: 'the VM DaemonSet pod Running',
    deadlineMs: 180_000,
  });
  t.ok(qemuPidsOf(vm.metadata!.uid!).length > 0, 'a DaemonSet meant for vkvm nodes runs its pod as a VM');

  const drain = await cluster.kubectl(['drain', NODE, '--ignore-daemonsets', '--timeout=60s']);
  t.match(drain, { code: 0, stdout: new RegExp(`node/${NODE} drained`) }, 'kubectl drain --ignore-daemonsets completes');
});

// What only the VMI controller may write, on the real control plane under the
// shipped policies (deploy/kubevirt-admission.yaml): a tenant with `edit`
// cannot grow a VMI after its launcher pod was sized, nor make its own pods
// into launcher pods (which the node would realize at the VMI's size, outside
// quota and the scheduler); the controllers, under the identity
// deploy/rbac.yaml gives them, still create launcher pods and write VMI specs.
// The subresource API's serving Secret can only be a TLS Secret. No node agent
// runs: these are admission decisions only.
import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import {
  controllersIdentity,
  createTenant,
  poll,
  smokeVmiSpec,
  startTestCluster,
  testLog,
  testNamespace,
  waitFor,
  apiOutcome,
} from './framework/index.js';

const NS = 'e2e-launcher-admission';
const KV = { group: 'kubevirt.io', version: 'v1', namespace: NS, plural: 'virtualmachineinstances' };
const SPEC_DENIED =
  /ValidatingAdmissionPolicy 'vkvm-vmi-spec-immutable' .*denied request: spec: a VirtualMachineInstance's spec cannot change/;
const OWNER_DENIED = /ValidatingAdmissionPolicy 'vkvm-launcher-pods' .*denied request: metadata\.ownerReferences: only the VMI controller/;
const LABEL_DENIED =
  /ValidatingAdmissionPolicy 'vkvm-launcher-pods' .*denied request: metadata\.labels\[kubevirt\.io\/created-by\]: only the VMI controller/;

const pod = (name: string, metadata: V1Pod['metadata'] = {}): V1Pod => ({
  metadata: { name, ...metadata },
  spec: { containers: [{ name: 'compute', image: 'vkvm/vmi', resources: { requests: { memory: '1Mi' } } }] },
});

t.test('only the VMI controller changes a VMI spec or makes launcher pods', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllerClients = await controllersIdentity(cluster);
  const controllers = startControllers(controllerClients, testLog.child({ component: 'controllers' }), { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  const ns = await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const patchVmi = (clients: KubeClients, body: object) => () =>
    clients.custom.patchNamespacedCustomObject({ ...KV, name: 'big', body }, mergePatch);

  // Retried until the cluster aggregates kubevirt.io:edit into edit.
  await poll(
    'the tenant creating a VMI',
    () =>
      tenant.custom.createNamespacedCustomObject({
        ...KV,
        body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'big' }, spec: smokeVmiSpec() },
      }),
    () => true,
  );
  const vmi = await waitFor(ns.vmi('big'), (v) => Boolean(v.status?.phase), { what: 'seen by the VMI controller' });
  const launcher = await waitFor(ns.pods({ labelSelector: 'kubevirt.io=virt-launcher' }), () => true, {
    what: 'the launcher pod, created by the controllers under vkvm:controllers',
  });
  t.match(
    launcher.metadata,
    {
      labels: { 'kubevirt.io/created-by': vmi.metadata.uid },
      ownerReferences: [{ kind: 'VirtualMachineInstance', uid: vmi.metadata.uid, controller: true }],
    },
    'the controllers (vkvm:controllers) still create the launcher pod with both markers',
  );

  await t.test('a tenant cannot change a VMI spec, but may label and annotate it', async (t) => {
    t.match(
      await apiOutcome(patchVmi(tenant, { spec: { domain: { memory: { guest: '64Gi' } } } })),
      { code: 403, message: SPEC_DENIED },
      'growing the guest memory after the launcher pod was sized is refused, naming spec',
    );
    t.match(
      await apiOutcome(patchVmi(tenant, { spec: { terminationGracePeriodSeconds: 1 } })),
      { code: 403, message: SPEC_DENIED },
      'any other spec change is refused too',
    );
    t.match(
      await apiOutcome(patchVmi(tenant, { metadata: { labels: { team: 'a' }, annotations: { note: 'kept' } } })),
      { code: 200 },
      'a label and annotation change is allowed',
    );
    t.match(
      await apiOutcome(patchVmi(controllerClients, { spec: { terminationGracePeriodSeconds: 5 } })),
      { code: 200 },
      'the controllers’ identity (the subresource API’s stop --grace-period) may change the spec',
    );
    const after = (await cluster.clients.custom.getNamespacedCustomObject({ ...KV, name: 'big' })) as VirtualMachineInstance;
    t.match(
      {
        requests: after.spec.domain?.resources?.requests,
        memory: after.spec.domain?.memory,
        grace: after.spec.terminationGracePeriodSeconds,
        labels: after.metadata.labels,
      },
      { requests: { memory: '128Mi' }, memory: undefined, grace: 5, labels: { team: 'a' } },
      'the VMI keeps its size; only the allowed writes landed',
    );
  });

  await t.test('a tenant cannot make a pod a launcher pod, on creation or by update', async (t) => {
    const owner = { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', name: 'big', uid: vmi.metadata.uid!, controller: true };
    const create = (body: V1Pod) => () => tenant.core.createNamespacedPod({ namespace: NS, body });
    t.match(
      await apiOutcome(create(pod('forged-owner', { ownerReferences: [owner] }))),
      { code: 403, message: OWNER_DENIED },
      'a pod with a VMI controller owner reference is refused, naming metadata.ownerReferences',
    );
    t.match(
      await apiOutcome(create(pod('forged-label', { labels: { 'kubevirt.io/created-by': vmi.metadata.uid! } }))),
      { code: 403, message: LABEL_DENIED },
      'a pod labelled kubevirt.io/created-by is refused, naming the label',
    );
    t.match(await apiOutcome(create(pod('plain', { labels: { app: 'plain' } }))), { code: 200 }, 'a plain pod is created');
    const patchPod = (name: string, body: object) => () => tenant.core.patchNamespacedPod({ name, namespace: NS, body }, mergePatch);
    t.match(
      await apiOutcome(patchPod('plain', { metadata: { ownerReferences: [owner] } })),
      { code: 403, message: OWNER_DENIED },
      'adding a VMI controller owner reference to an existing pod is refused',
    );
    t.match(
      await apiOutcome(patchPod('plain', { metadata: { labels: { 'kubevirt.io/created-by': vmi.metadata.uid } } })),
      { code: 403, message: LABEL_DENIED },
      'adding the created-by label to an existing pod is refused',
    );
    t.match(
      await apiOutcome(patchPod(launcher.metadata!.name!, { metadata: { labels: { 'kubevirt.io/created-by': 'another-uid' } } })),
      { code: 403, message: LABEL_DENIED },
      'pointing the launcher pod at another VMI is refused',
    );
    t.match(
      await apiOutcome(patchPod(launcher.metadata!.name!, { metadata: { labels: { team: 'a' } } })),
      { code: 200 },
      'labelling the launcher pod, its markers unchanged, is allowed',
    );
    const pods = await cluster.clients.core.listNamespacedPod({ namespace: NS });
    t.same(pods.items.map((p) => p.metadata!.name).sort(), [launcher.metadata!.name, 'plain'].sort(), 'nothing else was created');
  });

  await t.test("the subresource API's serving Secret is a TLS Secret, never a token the controllers could read", async (t) => {
    const secret = (type: string, annotations?: Record<string, string>) => () =>
      cluster.clients.core.createNamespacedSecret({
        namespace: 'kube-system',
        body: { metadata: { name: 'vkvm-subresources-tls', annotations }, type, stringData: { 'tls.crt': '', 'tls.key': '' } },
        dryRun: 'All',
      });
    t.match(
      await apiOutcome(secret('kubernetes.io/service-account-token', { 'kubernetes.io/service-account.name': 'default' })),
      {
        code: 403,
        message:
          /ValidatingAdmissionPolicy 'vkvm-subresources-serving-secret' .*denied request: type: .* must be of type kubernetes\.io\/tls/,
      },
      'as a service-account-token Secret it is refused, even to the admin',
    );
    t.match(await apiOutcome(secret('kubernetes.io/tls')), { code: 200 }, 'as a TLS Secret it may be made (dry run)');
  });
});

// The multi-node suite's (multi-node/nodes.ts) clone authorization, CDI's
// `datavolumes/source` check (deploy/clone-source-admission.yaml): a tenant
// with edit in its own namespace only is refused a DataVolume, or a VM's
// dataVolumeTemplate, that clones from another namespace, naming the field;
// once a RoleBinding there grants `create` on datavolumes/source, both are
// admitted, and the DataVolume's claim holds the source's bytes (written on
// the node into the source volume's file: no VM boots); a DataVolume's source
// cannot be changed afterwards; the staging claim in the source namespace
// (cross-namespace-clone.ts) is gone once the clone is done.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Test } from 'tap';
import { RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import type { DataVolume } from '../../provider/kubevirt/datavolume-types.js';
import {
  apiOutcome,
  dataVolumes,
  persistentVolumeClaims,
  poll,
  smokeVmiSpec,
  waitFor,
  waitForGone,
  type UpNode,
} from './framework/index.js';

const DV = { group: 'cdi.kubevirt.io', version: 'v1beta1', plural: 'datavolumes' };
const VM = { group: 'kubevirt.io', version: 'v1', plural: 'virtualmachines' };
const DEADLINE_MS = 120_000;

interface Options {
  admin: KubeClients;
  tenant: KubeClients;
  /** The tenant's namespace; its service account `tenant` has edit there. */
  namespace: string;
  /** Where the source claim is provisioned. */
  node: UpNode;
  upStateDir: string;
}

const cloneOf = (name: string, from: { namespace: string; name: string }): DataVolume => ({
  apiVersion: 'cdi.kubevirt.io/v1beta1',
  kind: 'DataVolume',
  metadata: { name },
  spec: { source: { pvc: from }, storage: {} },
});

/** A VM whose second template clones `from` (the first is blank), so the refusal must name index 1. */
const vmCloning = (from: { namespace: string; name: string }) => ({
  apiVersion: 'kubevirt.io/v1',
  kind: 'VirtualMachine',
  metadata: { name: 'vm-clone' },
  spec: {
    runStrategy: 'Halted',
    dataVolumeTemplates: [
      { metadata: { name: 'vm-clone-blank' }, spec: { source: { blank: {} }, storage: { resources: { requests: { storage: '8Mi' } } } } },
      { metadata: { name: 'vm-clone-root' }, spec: { source: { pvc: from }, storage: {} } },
    ],
    template: { spec: smokeVmiSpec() },
  },
});

/** A pool whose VM template clones `from`: the pool controller makes its VMs, so the pool's writer is checked. */
const poolCloning = (from: { namespace: string; name: string }) => {
  const vm = vmCloning(from);
  const labels = { 'kubevirt.io/vmpool': 'pool-clone' };
  return {
    apiVersion: 'pool.kubevirt.io/v1alpha1',
    kind: 'VirtualMachinePool',
    metadata: { name: 'pool-clone' },
    spec: {
      replicas: 0,
      selector: { matchLabels: labels },
      virtualMachineTemplate: { metadata: { labels }, spec: { ...vm.spec, dataVolumeTemplates: [vm.spec.dataVolumeTemplates[1]] } },
    },
  };
};

export async function cloneSourceAuthorization(t: Test, o: Options): Promise<void> {
  const { admin, tenant, namespace } = o;
  const source = `${namespace}-golden`;
  const from = { namespace: source, name: 'golden' };
  await admin.core.createNamespace({ body: { metadata: { name: source } } });
  t.teardown(() => admin.core.deleteNamespace({ name: source }).then(() => undefined));
  const stateDir = o.node.simulated?.stateDir ?? o.upStateDir;
  const volumeFileOf = async (claim: { namespace: string; name: string }) => {
    const bound = await admin.core.readNamespacedPersistentVolumeClaim(claim);
    const pv = await admin.core.readPersistentVolume({ name: bound.spec!.volumeName! });
    return join(stateDir, 'csi', 'volumes', `${pv.spec!.csi!.volumeHandle}.img`);
  };
  // The source: a Block claim on the node, provisioned without a consumer (the node named for it), its first bytes a marker.
  await admin.core.createNamespacedPersistentVolumeClaim({
    namespace: source,
    body: {
      metadata: { name: 'golden', annotations: { 'volume.kubernetes.io/selected-node': o.node.name } },
      spec: { accessModes: ['ReadWriteOnce'], volumeMode: 'Block', resources: { requests: { storage: '8Mi' } } },
    },
  });
  await waitFor(persistentVolumeClaims(admin, source, { name: 'golden' }), (c) => c.status?.phase === 'Bound', {
    what: 'Bound',
    deadlineMs: DEADLINE_MS,
  });
  const marker = `golden-${randomBytes(6).toString('hex')}`;
  const written = await o.node.exec(['sh', '-c', `printf ${marker} | dd of=${await volumeFileOf(from)} conv=notrunc status=none`]);
  t.equal(written.code, 0, `the marker written into the source volume: ${written.stderr}`);
  const createDv = (dv: DataVolume) => tenant.custom.createNamespacedCustomObject({ ...DV, namespace, body: dv });
  const dryRunVm = () => tenant.custom.createNamespacedCustomObject({ ...VM, namespace, body: vmCloning(from), dryRun: 'All' });

  t.match(
    await apiOutcome(() => createDv(cloneOf('dv-elsewhere', from))),
    {
      code: 403,
      message: new RegExp(
        `spec\\.source\\.pvc\\.namespace: cloning from namespace ${source} needs permission to create datavolumes/source`,
      ),
    },
    'a clone from a namespace where the tenant may not create datavolumes/source is refused at admission, naming the field',
  );
  t.match(
    await apiOutcome(dryRunVm),
    {
      code: 403,
      message: new RegExp(`spec\\.dataVolumeTemplates\\[1\\]\\.spec\\.source\\.pvc\\.namespace: cloning from namespace ${source}`),
    },
    "a VM whose second dataVolumeTemplate clones from there is refused, naming that template's field",
  );
  t.match(
    await apiOutcome(() =>
      tenant.custom.createNamespacedCustomObject({
        group: 'pool.kubevirt.io',
        version: 'v1alpha1',
        plural: 'virtualmachinepools',
        namespace,
        body: poolCloning(from),
        dryRun: 'All',
      }),
    ),
    {
      code: 403,
      message: new RegExp(
        `spec\\.virtualMachineTemplate\\.spec\\.dataVolumeTemplates\\[0\\]\\.spec\\.source\\.pvc\\.namespace: cloning from namespace ${source}`,
      ),
    },
    "so is a VirtualMachinePool whose VM template's dataVolumeTemplate does (its VMs are the pool controller's to make)",
  );

  // CDI's grant: create on datavolumes/source in the source namespace, nothing else there.
  const rbac = admin.kc.makeApiClient(RbacAuthorizationV1Api);
  await rbac.createNamespacedRole({
    namespace: source,
    body: {
      metadata: { name: 'clone-source' },
      rules: [{ apiGroups: ['cdi.kubevirt.io'], resources: ['datavolumes/source'], verbs: ['create'] }],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: source,
    body: {
      metadata: { name: 'clone-source' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'clone-source' },
      subjects: [{ kind: 'ServiceAccount', name: 'tenant', namespace }],
    },
  });
  // The authorizer reads RBAC from its cache: the binding takes effect a moment later.
  const admitted = await poll(
    'the clone admitted once granted',
    () => apiOutcome(dryRunVm),
    (r) => r.code !== 403,
    {
      deadlineMs: 30_000,
      intervalMs: 200,
    },
  );
  t.same(admitted, { code: 200, message: '' }, 'with datavolumes/source granted there, the VM cloning from it is admitted');
  t.same(await apiOutcome(() => createDv(cloneOf('dv-elsewhere', from))), { code: 200, message: '' }, 'so is the DataVolume');

  t.match(
    await apiOutcome(() =>
      tenant.custom.patchNamespacedCustomObject(
        { ...DV, namespace, name: 'dv-elsewhere', body: { spec: { source: { pvc: { namespace, name: 'other' } } } } },
        mergePatch,
      ),
    ),
    { code: 403, message: /spec\.source: a DataVolume's source cannot change after creation/ },
    "the DataVolume's source cannot be changed after it was admitted",
  );

  const cloned = await waitFor(dataVolumes(tenant, namespace, { name: 'dv-elsewhere' }), (d) => d.status?.phase === 'Succeeded', {
    what: 'Succeeded',
    deadlineMs: DEADLINE_MS,
  });
  const claim = await tenant.core.readNamespacedPersistentVolumeClaim({ name: 'dv-elsewhere', namespace });
  // CDI's phase while the copy is made in the source namespace, told as the event each phase change records.
  const reasons = (
    await tenant.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.uid=${cloned.metadata.uid}` })
  ).items.map((e) => e.reason);
  const head = await o.node.exec(['head', '-c', String(marker.length), await volumeFileOf({ namespace, name: 'dv-elsewhere' })]);
  t.match(
    {
      phase: cloned.status?.phase,
      claim: { phase: claim.status?.phase, mode: claim.spec?.volumeMode, owner: claim.metadata?.ownerReferences },
      bytes: head.stdout,
      cloneInProgress: reasons.includes('CloneInProgress'),
    },
    {
      phase: 'Succeeded',
      claim: { phase: 'Bound', mode: 'Block', owner: [{ kind: 'DataVolume', name: 'dv-elsewhere', controller: true }] },
      bytes: marker,
      cloneInProgress: true,
    },
    "the admitted clone from the other namespace succeeds (CloneInProgress on the way): the DataVolume's own claim holds the source's bytes",
  );
  await waitForGone(persistentVolumeClaims(admin, source, { name: `vkvm-clone-${cloned.metadata.uid}` }), { deadlineMs: DEADLINE_MS });
  t.equal(
    (await admin.core.readNamespacedPersistentVolumeClaim(from)).status?.phase,
    'Bound',
    'the staging claim in the source namespace is gone; the source claim is untouched',
  );
  await tenant.custom.deleteNamespacedCustomObject({ ...DV, namespace, name: 'dv-elsewhere' });
  await waitForGone(persistentVolumeClaims(tenant, namespace, { name: 'dv-elsewhere' }), { deadlineMs: DEADLINE_MS });
}

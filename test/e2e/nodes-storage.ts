// The multi-node suite's storage subtests (multi-node/nodes.ts): on `vkvm up --nodes 2`, each vkvm node
// runs vkvm csi and external-provisioner; a tenant (edit in one namespace)
// claims volumes with no class named. The first sets the selected-node
// annotation as the scheduler does for a claim's first pod, once per node;
// the second leaves it to the scheduler: a VMI on a new claim is placed, its
// volume provisioned on that node, published there by the agent's CSI node
// side, and the VM boots with it.
import { join } from 'node:path';
import { StorageV1Api, type V1PersistentVolume, type V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Test } from 'tap';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { apiOutcome, pods, poll, smokeVmiSpec, virtualMachineInstances, waitFor, waitForGone, type UpNode } from './framework/index.js';

const CLASS = 'vkvm-local';
const DRIVER = 'csi.vkvm.io';
const TOPOLOGY_KEY = 'topology.vkvm.io/node';
const CLAIM_SIZE = '64Mi';
const DEADLINE_MS = 120_000;

const claim = (name: string, storage: string): V1PersistentVolumeClaim => ({
  metadata: { name },
  spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage } } },
});

export async function claimsOnBothNodes(
  t: Test,
  o: { admin: KubeClients; tenant: KubeClients; namespace: string; nodes: UpNode[]; upStateDir: string },
): Promise<void> {
  const { admin, tenant, namespace } = o;
  const storageAdmin = admin.kc.makeApiClient(StorageV1Api);
  const storageTenant = tenant.kc.makeApiClient(StorageV1Api);
  const csiDirOf = (node: UpNode) => join(node.simulated?.stateDir ?? o.upStateDir, 'csi');

  const capacities = await poll(
    "each node's CSIStorageCapacity for the default class",
    async () => (await storageAdmin.listNamespacedCSIStorageCapacity({ namespace: 'kube-system' })).items,
    (cs) => o.nodes.every((n) => cs.some((c) => c.nodeTopology?.matchLabels?.[TOPOLOGY_KEY] === n.name && c.capacity)),
    { deadlineMs: DEADLINE_MS },
  );
  t.match(
    o.nodes.map((n) => capacities.find((c) => c.nodeTopology?.matchLabels?.[TOPOLOGY_KEY] === n.name)),
    o.nodes.map((n) => ({ storageClassName: CLASS, nodeTopology: { matchLabels: { [TOPOLOGY_KEY]: n.name } }, capacity: /^\d/ })),
    "each node's provisioner publishes its node's capacity",
  );

  t.match(
    (await storageAdmin.readCSIDriver({ name: DRIVER })).spec,
    { attachRequired: false, podInfoOnMount: false, storageCapacity: true },
    'vkvm up made the CSIDriver',
  );

  await admin.core.createNamespacedResourceQuota({
    namespace,
    body: { metadata: { name: 'storage' }, spec: { hard: { 'requests.storage': '1Gi' } } },
  });
  const quota = () => admin.core.readNamespacedResourceQuota({ name: 'storage', namespace });
  // Until the quota controller computed its status, quota admission refuses every claim.
  await poll('the quota computed', quota, (q) => q.status?.hard?.['requests.storage'] !== undefined);
  t.match(
    await apiOutcome(() => tenant.core.createNamespacedPersistentVolumeClaim({ namespace, body: claim('too-big', '2Gi') })),
    { code: 403, message: /exceeded quota: storage/ },
    'a claim beyond the quota on requests.storage is refused',
  );

  const names = o.nodes.map((n) => `data-${n.name}`);
  for (const name of names) {
    const made = await tenant.core.createNamespacedPersistentVolumeClaim({ namespace, body: claim(name, CLAIM_SIZE) });
    t.equal(made.spec?.storageClassName, CLASS, `${name} gets the default class`);
  }
  t.equal((await quota()).status?.used?.['requests.storage'], '128Mi', 'the quota counts both claims');

  const volumes: Array<{ pv: string; file: string; node: UpNode }> = [];
  for (const [i, node] of o.nodes.entries()) {
    const name = names[i]!;
    const events = await poll(
      `${name}'s WaitForFirstConsumer event`,
      async () => (await tenant.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name}` })).items,
      (es) => es.some((e) => e.reason === 'WaitForFirstConsumer'),
      { deadlineMs: DEADLINE_MS },
    );
    const pending = await tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace });
    t.match(
      { phase: pending.status?.phase, volumeName: pending.spec?.volumeName, reason: events.at(-1)?.reason },
      { phase: 'Pending', volumeName: undefined, reason: 'WaitForFirstConsumer' },
      `${name} waits for its first consumer`,
    );
    // What the scheduler writes when it places the claim's first pod on the node.
    await admin.core.patchNamespacedPersistentVolumeClaim(
      { name, namespace, body: { metadata: { annotations: { 'volume.kubernetes.io/selected-node': node.name } } } },
      mergePatch,
    );
    const bound = await poll(
      `${name} Bound`,
      () => tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace }),
      (c) => c.status?.phase === 'Bound',
      { deadlineMs: DEADLINE_MS },
    );
    const pv: V1PersistentVolume = await admin.core.readPersistentVolume({ name: bound.spec!.volumeName! });
    t.match(
      {
        claim: bound.status?.capacity,
        pv: pv.spec?.capacity,
        driver: pv.spec?.csi?.driver,
        affinity: pv.spec?.nodeAffinity?.required?.nodeSelectorTerms,
        claimRef: pv.spec?.claimRef?.name,
      },
      {
        claim: { storage: CLAIM_SIZE },
        pv: { storage: CLAIM_SIZE },
        driver: DRIVER,
        affinity: [{ matchExpressions: [{ key: TOPOLOGY_KEY, operator: 'In', values: [node.name] }] }],
        claimRef: name,
      },
      `${name} is bound to a ${CLAIM_SIZE} volume of ${DRIVER} pinned to ${node.name}`,
    );
    const file = join(csiDirOf(node), 'volumes', `${pv.spec!.csi!.volumeHandle}.img`);
    t.equal((await node.exec(['test', '-f', file])).code, 0, `the volume's file is on ${node.name}: ${file}`);
    volumes.push({ pv: pv.metadata!.name!, file, node });
  }

  for (const name of names) await tenant.core.deleteNamespacedPersistentVolumeClaim({ name, namespace });
  for (const v of volumes) {
    await poll(
      `${v.pv} deleted`,
      () => apiOutcome(() => admin.core.readPersistentVolume({ name: v.pv })),
      (r) => r.code === 404,
      { deadlineMs: DEADLINE_MS },
    );
    t.not((await v.node.exec(['test', '-e', v.file])).code, 0, `deleting the claim deleted ${v.pv} and its file on ${v.node.name}`);
  }
  const after = await poll('the quota to count the claims gone', quota, (q) => q.status?.used?.['requests.storage'] === '0');
  t.equal(after.status?.used?.['requests.storage'], '0', 'the quota no longer counts them');
  await admin.core.deleteNamespacedResourceQuota({ name: 'storage', namespace });

  const existingClass = await storageAdmin.readStorageClass({ name: CLASS });
  t.match(
    {
      createClass: await apiOutcome(() =>
        storageTenant.createStorageClass({ body: { ...existingClass, metadata: { name: 'mine' }, parameters: {} } }),
      ),
      editClass: await apiOutcome(() =>
        storageTenant.patchStorageClass(
          { name: CLASS, body: { metadata: { annotations: { 'storageclass.kubernetes.io/is-default-class': 'false' } } } },
          mergePatch,
        ),
      ),
      createDriver: await apiOutcome(() =>
        storageTenant.createCSIDriver({ body: { metadata: { name: 'mine.example.com' }, spec: { attachRequired: false } } }),
      ),
      editDriver: await apiOutcome(() =>
        storageTenant.patchCSIDriver({ name: DRIVER, body: { metadata: { labels: { mine: 'yes' } } } }, mergePatch),
      ),
    },
    { createClass: { code: 403 }, editClass: { code: 403 }, createDriver: { code: 403 }, editDriver: { code: 403 } },
    'the tenant may neither create nor edit a StorageClass or the CSIDriver',
  );
}

/** What a storage case on one node of `vkvm up --nodes 2` is given: the tenant's namespace and the node its VMs run on. */
export interface StorageCase {
  admin: KubeClients;
  tenant: KubeClients;
  namespace: string;
  node: UpNode;
  upStateDir: string;
  bootDeadlineMs: number;
}

/** A VMI on a claim of the default class, pinned to `node` by nodeSelector: nothing set by hand between the claim and the boot. */
export async function vmiOnDefaultClassClaim(
  t: Test,
  o: StorageCase & {
    /** Run on the running VMI before it goes (its claim, size and launcher pod), so other checks need no VM of their own. */
    whileRunning?: (vm: { claimName: string; claimMiB: number; podName: string }) => Promise<void>;
  },
): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const stateDir = node.simulated?.stateDir ?? o.upStateDir;
  await tenant.core.createNamespacedPersistentVolumeClaim({ namespace, body: claim('vmi-data', CLAIM_SIZE) });
  const spec = smokeVmiSpec();
  spec.nodeSelector = { 'kubernetes.io/hostname': node.name };
  spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
  spec.volumes!.push({ name: 'data', persistentVolumeClaim: { claimName: 'vmi-data' } });
  await tenant.custom.createNamespacedCustomObject({
    group: 'kubevirt.io',
    version: 'v1',
    namespace,
    plural: 'virtualmachineinstances',
    body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', metadata: { name: 'vmi-csi' }, spec },
  });
  const vmi: VirtualMachineInstance = await waitFor(
    virtualMachineInstances(admin, namespace, { name: 'vmi-csi' }),
    (v) => v.status?.phase === 'Running' || v.status?.phase === 'Failed',
    { what: 'Running', deadlineMs: o.bootDeadlineMs },
  );
  const bound = await tenant.core.readNamespacedPersistentVolumeClaim({ name: 'vmi-data', namespace });
  const pv = await admin.core.readPersistentVolume({ name: bound.spec!.volumeName! });
  const [launcher] = (await admin.core.listNamespacedPod({ namespace, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` })).items;
  const uid = launcher!.metadata!.uid!;
  const disk = join(stateDir, 'pods', uid, 'volumes', 'kubernetes.io~csi', pv.metadata!.name!, 'mount', 'disk.img');
  t.match(
    {
      phase: vmi.status?.phase,
      node: vmi.status?.nodeName,
      claim: bound.status?.phase,
      driver: pv.spec?.csi?.driver,
      pinned: pv.spec?.nodeAffinity?.required?.nodeSelectorTerms?.[0]?.matchExpressions?.[0]?.values,
      diskImg: (await node.exec(['test', '-f', disk])).code,
    },
    { phase: 'Running', node: node.name, claim: 'Bound', driver: DRIVER, pinned: [node.name], diskImg: 0 },
    `the VMI runs on ${node.name}, its claim provisioned there by the scheduler's pick and published for its pod: ${disk}`,
  );
  await o.whileRunning?.({ claimName: 'vmi-data', claimMiB: parseInt(CLAIM_SIZE, 10), podName: launcher!.metadata!.name! });
  await tenant.custom.deleteNamespacedCustomObject({
    group: 'kubevirt.io',
    version: 'v1',
    namespace,
    plural: 'virtualmachineinstances',
    name: 'vmi-csi',
  });
  await waitForGone(pods(admin, namespace, { labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` }), { deadlineMs: 120_000 });
  const mounts = await poll(
    "the VM's volume taken down",
    async () => (await node.exec(['sh', '-c', `grep -c ${stateDir}/p /proc/self/mountinfo || true`])).stdout.trim(),
    (n) => n === '0',
    { deadlineMs: 60_000 },
  );
  t.equal(mounts, '0', 'with the VMI gone, nothing is published or staged on the node');
  await tenant.core.deleteNamespacedPersistentVolumeClaim({ name: 'vmi-data', namespace });
  await poll(
    `${pv.metadata!.name!} deleted`,
    () => apiOutcome(() => admin.core.readPersistentVolume({ name: pv.metadata!.name! })),
    (r) => r.code === 404,
    { deadlineMs: DEADLINE_MS },
  );
}

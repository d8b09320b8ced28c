// The multi-node suite's (multi-node/nodes.ts) DataVolume subtests: on `vkvm up --nodes 2`, vkvm serves
// cdi.kubevirt.io DataVolumes (no CDI installed). A tenant (edit in one
// namespace) runs a VM whose dataVolumeTemplates hold a blank DataVolume: it
// boots with the disk, writes a marker, and reads it back after a stop and a
// start; a DataVolume cloned from it (pvc source) holds the marker, on the
// same node; status phases, progress, conditions and events are CDI's; the
// tenant cannot write DataVolume status or clone from another namespace; and
// deleting the VM takes its DataVolume, claim, volume and the node's paths.
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Test } from 'tap';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import type { DataVolume } from '../../provider/kubevirt/datavolume-types.js';
import type { VirtualMachine } from '../../provider/kubevirt/types.js';
import {
  apiOutcome,
  dataVolumes,
  events,
  persistentVolumeClaims,
  poll,
  smokeVmiSpec,
  virtualMachineInstances,
  waitFor,
  waitForGone,
  type UpNode,
} from './framework/index.js';

const DV = { group: 'cdi.kubevirt.io', version: 'v1beta1', plural: 'datavolumes' };
const VMS = { group: 'kubevirt.io', version: 'v1', plural: 'virtualmachines' };
/** 48Mi: 98304 sectors, which tells the disk from the smoke VM's 64Mi emptyDisk in the guest. */
const SIZE = '48Mi';
const SECTORS = 98304;
const DEADLINE_MS = 120_000;

interface Options {
  admin: KubeClients;
  tenant: KubeClients;
  namespace: string;
  node: UpNode;
  upStateDir: string;
  bootDeadlineMs: number;
  kubectl: (args: string[]) => Promise<{ code: number | null; stdout: string; stderr: string }>;
}

const blank = (name: string, extra: Partial<DataVolume['spec']> = {}): DataVolume => ({
  apiVersion: 'cdi.kubevirt.io/v1beta1',
  kind: 'DataVolume',
  metadata: { name },
  spec: { source: { blank: {} }, storage: { resources: { requests: { storage: SIZE } } }, ...extra },
});

/** The tenant's VM: the smoke VM on `node`, plus the blank DataVolume `data` as a virtio disk. */
function vmWithDataVolume(name: string, node: string): VirtualMachine {
  const spec = smokeVmiSpec();
  spec.nodeSelector = { 'kubernetes.io/hostname': node };
  spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
  spec.volumes!.push({ name: 'data', dataVolume: { name: `${name}-data` } });
  const template = blank(`${name}-data`);
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachine',
    metadata: { name },
    spec: {
      runStrategy: 'Always',
      dataVolumeTemplates: [{ metadata: { name: template.metadata.name! }, spec: template.spec }],
      template: { spec },
    },
  };
}

/** Statuses, conditions and tenant boundaries a DataVolume shows without a VM. */
export async function dataVolumeBoundaries(t: Test, o: Options): Promise<void> {
  const { tenant, namespace } = o;
  const create = (dv: DataVolume) => tenant.custom.createNamespacedCustomObject({ ...DV, namespace, body: dv });

  await create(blank('dv-wait'));
  const waiting = await waitFor(dataVolumes(tenant, namespace, { name: 'dv-wait' }), (d) => d.status?.phase === 'WaitForFirstConsumer', {
    what: 'WaitForFirstConsumer',
    deadlineMs: DEADLINE_MS,
  });
  const claim = await tenant.core.readNamespacedPersistentVolumeClaim({ name: 'dv-wait', namespace });
  t.match(
    {
      status: waiting.status,
      claim: {
        phase: claim.status?.phase,
        class: claim.spec?.storageClassName,
        annotations: claim.metadata?.annotations,
        owner: claim.metadata?.ownerReferences,
      },
    },
    {
      status: {
        phase: 'WaitForFirstConsumer',
        progress: 'N/A',
        claimName: 'dv-wait',
        conditions: [
          { type: 'Bound', status: 'False', reason: 'Pending', message: 'PVC dv-wait Pending' },
          { type: 'Ready', status: 'False' },
          { type: 'Running', status: 'False' },
        ],
      },
      claim: {
        phase: 'Pending',
        class: 'vkvm-local',
        annotations: { 'cdi.kubevirt.io/storage.import.source': 'none' },
        owner: [{ kind: 'DataVolume', name: 'dv-wait', controller: true }],
      },
    },
    'a blank DataVolume nothing uses waits for its first consumer; its claim is its own, of the default class, source none',
  );

  t.match(
    await apiOutcome(() =>
      tenant.custom.patchNamespacedCustomObjectStatus(
        { ...DV, namespace, name: 'dv-wait', body: { status: { phase: 'Succeeded' } } },
        mergePatch,
      ),
    ),
    { code: 403 },
    'the tenant cannot write DataVolume status',
  );
  t.match(
    await apiOutcome(() => create(blank('dv-ca', { source: { http: { url: 'https://example.com/d.img', certConfigMap: 'ca' } } }))),
    { code: 422, message: /spec\.source\.http\.certConfigMap: a custom CA is not supported/ },
    'a field vkvm does not serve is refused at admission, named',
  );

  await create(blank('dv-elsewhere', { source: { pvc: { name: 'anything', namespace: 'default' } }, storage: {} }));
  const refused = await waitFor(dataVolumes(tenant, namespace, { name: 'dv-elsewhere' }), (d) => d.status?.phase === 'Failed', {
    what: 'Failed',
    deadlineMs: DEADLINE_MS,
  });
  t.match(
    refused.status?.conditions?.find((c) => c.type === 'Ready'),
    { status: 'False', message: 'spec.source.pvc.namespace: clone from another namespace is not supported' },
    'a clone from another namespace is refused, naming the field; no claim is made',
  );
  t.equal(
    (await apiOutcome(() => tenant.core.readNamespacedPersistentVolumeClaim({ name: 'dv-elsewhere', namespace }))).code,
    404,
    'the refused DataVolume has no claim',
  );

  for (const name of ['dv-wait', 'dv-elsewhere']) await tenant.custom.deleteNamespacedCustomObject({ ...DV, namespace, name });
  await waitForGone(persistentVolumeClaims(tenant, namespace, { name: 'dv-wait' }), { deadlineMs: DEADLINE_MS });
}

/** A VM with a blank DataVolume: boot, marker, stop/start, clone, and everything gone with the VM. */
export async function vmOnDataVolume(t: Test, o: Options): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const stateDir = node.simulated?.stateDir ?? o.upStateDir;
  const name = 'dv-vm';
  const dvName = `${name}-data`;
  await tenant.custom.createNamespacedCustomObject({ ...VMS, namespace, body: vmWithDataVolume(name, node.name) });

  const guest = async (script: string): Promise<string> => {
    const vmi = await waitFor(virtualMachineInstances(tenant, namespace, { name }), (v) => v.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: o.bootDeadlineMs,
    });
    const [pod] = (await tenant.core.listNamespacedPod({ namespace, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` })).items;
    const find = `d=; for b in /sys/block/vd*; do [ "$(cat $b/size)" = ${SECTORS} ] && d=/dev/\${b##*/}; done; [ -n "$d" ]; ${script}`;
    const r = await poll(
      'the guest agent runs the script',
      () => o.kubectl(['exec', pod!.metadata!.name!, '--', '/bin/sh', '-c', find]),
      (x) => x.code === 0,
      {
        deadlineMs: o.bootDeadlineMs,
        intervalMs: 2000,
      },
    );
    return r.stdout.trim();
  };
  const runStrategy = async (strategy: 'Always' | 'Halted') => {
    await tenant.custom.patchNamespacedCustomObject({ ...VMS, namespace, name, body: { spec: { runStrategy: strategy } } }, mergePatch);
    if (strategy === 'Halted') await waitForGone(virtualMachineInstances(tenant, namespace, { name }), { deadlineMs: DEADLINE_MS });
  };

  const marker = `dv-marker-${randomBytes(4).toString('hex')}`;
  await guest(`printf ${marker} > $d; sync`);
  const dv = await waitFor(dataVolumes(tenant, namespace, { name: dvName }), (d) => d.status?.phase === 'Succeeded', { what: 'Succeeded' });
  const vm = (await tenant.custom.getNamespacedCustomObject({ ...VMS, namespace, name })) as VirtualMachine;
  t.match(
    {
      status: dv.status,
      owner: dv.metadata.ownerReferences,
    },
    {
      status: {
        phase: 'Succeeded',
        progress: '100.0%',
        claimName: dvName,
        conditions: [
          { type: 'Bound', status: 'True', reason: 'Bound' },
          { type: 'Ready', status: 'True' },
          { type: 'Running', status: 'False', reason: 'Completed' },
        ],
      },
      owner: [{ kind: 'VirtualMachine', name, uid: vm.metadata.uid, controller: true }],
    },
    "the VM's DataVolume is the VM's, Succeeded at 100.0% once its claim is bound under the running VM",
  );
  const reasons = (
    await tenant.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.kind=DataVolume,involvedObject.name=${dvName}` })
  ).items.map((e) => e.reason);
  t.ok(
    ['Pending', 'Bound', 'ImportSucceeded'].every((r) => reasons.includes(r)),
    `CDI's events on the DataVolume: ${reasons.join(', ')}`,
  );

  await runStrategy('Halted');
  await runStrategy('Always');
  t.equal(await guest(`head -c ${marker.length} $d`), marker, 'after a stop and a start the VM reads its marker back from the DataVolume');
  await runStrategy('Halted');

  // A clone of the VM's DataVolume: provisioned on its node, holding the marker.
  await tenant.custom.createNamespacedCustomObject({
    ...DV,
    namespace,
    body: {
      apiVersion: 'cdi.kubevirt.io/v1beta1',
      kind: 'DataVolume',
      metadata: { name: 'dv-clone' },
      spec: { source: { pvc: { name: dvName } }, storage: {} },
    },
  });
  const clone = await waitFor(dataVolumes(tenant, namespace, { name: 'dv-clone' }), (d) => d.status?.phase === 'Succeeded', {
    what: 'Succeeded',
    deadlineMs: DEADLINE_MS,
  });
  const cloneClaim = await tenant.core.readNamespacedPersistentVolumeClaim({ name: 'dv-clone', namespace });
  const clonePv = await admin.core.readPersistentVolume({ name: cloneClaim.spec!.volumeName! });
  const file = join(stateDir, 'csi', 'volumes', `${clonePv.spec!.csi!.volumeHandle}.img`);
  const copied = await node.exec(['sh', '-c', `debugfs -R 'cat /disk.img' ${file} 2>/dev/null | head -c ${marker.length}`]);
  t.match(
    {
      phase: clone.status?.phase,
      progress: clone.status?.progress,
      dataSource: cloneClaim.spec?.dataSource,
      selectedNode: cloneClaim.metadata?.annotations?.['volume.kubernetes.io/selected-node'],
      capacity: cloneClaim.status?.capacity?.storage,
      marker: copied.stdout,
    },
    {
      phase: 'Succeeded',
      progress: '100.0%',
      dataSource: { kind: 'PersistentVolumeClaim', name: dvName },
      selectedNode: node.name,
      capacity: SIZE,
      marker,
    },
    `the clone is made on ${node.name}, where its source lives, of the source's size, and holds the marker`,
  );
  const cloneEvents = await waitFor(
    events(tenant, namespace, { fieldSelector: 'involvedObject.name=dv-clone,reason=CloneSucceeded' }),
    () => true,
    {
      what: 'CloneSucceeded',
    },
  );
  t.match(cloneEvents.message, `Successfully cloned from ${namespace}/${dvName} into ${namespace}/dv-clone`, 'CDI’s clone event');

  // Everything goes with the VM (its DataVolume, claim, volume) and with the clone's DataVolume.
  const pvName = (await tenant.core.readNamespacedPersistentVolumeClaim({ name: dvName, namespace })).spec!.volumeName!;
  await tenant.custom.deleteNamespacedCustomObject({ ...VMS, namespace, name });
  await tenant.custom.deleteNamespacedCustomObject({ ...DV, namespace, name: 'dv-clone' });
  await waitForGone(dataVolumes(tenant, namespace, { name: dvName }), { deadlineMs: DEADLINE_MS });
  await waitForGone(persistentVolumeClaims(tenant, namespace, {}), { deadlineMs: DEADLINE_MS });
  for (const pv of [pvName, clonePv.metadata!.name!]) {
    await poll(
      `${pv} deleted`,
      () => apiOutcome(() => admin.core.readPersistentVolume({ name: pv })),
      (r) => r.code === 404,
      {
        deadlineMs: DEADLINE_MS,
      },
    );
  }
  // Unpublished and unstaged when the VMI went: no mount below the node's state, no CSI record left.
  const leftovers = async () =>
    (
      await node.exec([
        'sh',
        '-c',
        `grep -c ${stateDir}/p /proc/self/mountinfo; find ${stateDir}/pods ${stateDir}/plugins/kubernetes.io/csi -name vol_data.json 2>/dev/null | wc -l`,
      ])
    ).stdout
      .trim()
      .split('\n');
  t.same(
    await poll('nothing of the volumes left on the node', leftovers, (l) => l.join() === '0,0', { deadlineMs: 60_000 }).catch(leftovers),
    ['0', '0'],
    'the VM deleted: its DataVolume, claims and volumes are gone, nothing published or staged on the node',
  );
}

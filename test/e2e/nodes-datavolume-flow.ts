// The multi-node suite's (multi-node/nodes.ts) DataVolume acceptance flow
// (issue #27), one VM serving it all on node 2 of `vkvm up --nodes 2`, as a
// tenant: a VM whose dataVolumeTemplates import its root disk from an image
// (registry source, with a pull secret the node reads under its own
// credentials) and hold a blank data disk. The guest writes a marker to the
// data disk and reads it back after virtctl stop/start, and after virtctl
// restart with the node's agent restarted in between; a second VM boots from
// a clone of the first one's root volume; a VolumeSnapshot of the data volume,
// restored into a new claim, holds the marker; deleting it all removes the
// volumes, snapshot, VolumeAttachments and the node's staging and publish paths.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Test } from 'tap';
import { StorageV1Api } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';
import type { DataVolume } from '../../provider/kubevirt/datavolume-types.js';
import type { VirtualMachine } from '../../provider/kubevirt/types.js';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import { importReportOf } from '../../provider/kubevirt/datavolume-report.js';
import { ensureVirtctl, runVirtctl } from '../helpers/virtctl.js';
import {
  dataVolumes,
  events,
  persistentVolumeClaims,
  poll,
  smokeVmiSpec,
  virtualMachineInstances,
  waitFor,
  waitForGone,
} from './framework/index.js';
import { importBoundaries } from './nodes-imports.js';
import { snapshotBoundaries, snapshotOf, type Snapshot } from './nodes-snapshots.js';
import type { UpNode } from './framework/index.js';

const VMS = { group: 'kubevirt.io', version: 'v1', plural: 'virtualmachines' };
/** 48Mi: 98304 sectors, which tells the data disk from the 64Mi root and emptyDisk in the guest. */
const DATA_SIZE = '48Mi';
const DATA_SECTORS = 98304;
const ROOT_SIZE = '64Mi';
const DEADLINE_MS = 120_000;

export interface FlowOptions {
  admin: KubeClients;
  tenant: KubeClients;
  namespace: string;
  node: UpNode;
  /** The node's own identity (system:node:<name>). */
  nodeIdentity: KubeClients;
  upStateDir: string;
  bootDeadlineMs: number;
  /** The tenant's kubeconfig file (kubectl and virtctl). */
  tenantKubeconfig: string;
  kubectl: (args: string[]) => Promise<{ code: number | null; stdout: string; stderr: string }>;
}

/** The smoke VM on `node`, booting from the DataVolume `<name>-root` made from `root`, plus a blank `<name>-data` if `data`. */
function vmOnDataVolumes(name: string, node: string, root: DataVolume['spec'], data: boolean): VirtualMachine {
  const spec = smokeVmiSpec();
  spec.nodeSelector = { 'kubernetes.io/hostname': node };
  const devices = spec.domain.devices!;
  devices.disks = devices.disks!.map((d) => (d.name === 'containerdisk' ? { ...d, name: 'root' } : d));
  spec.volumes = spec.volumes!.map((v) => (v.name === 'containerdisk' ? { name: 'root', dataVolume: { name: `${name}-root` } } : v));
  const templates = [{ metadata: { name: `${name}-root` }, spec: root }];
  if (data) {
    devices.disks.push({ name: 'data', disk: { bus: 'virtio' } });
    spec.volumes.push({ name: 'data', dataVolume: { name: `${name}-data` } });
    templates.push({
      metadata: { name: `${name}-data` },
      spec: { source: { blank: {} }, storage: { resources: { requests: { storage: DATA_SIZE } } } },
    });
  }
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachine',
    metadata: { name },
    spec: { runStrategy: 'Always', dataVolumeTemplates: templates, template: { spec } },
  };
}

export async function dataVolumeFlow(t: Test, o: FlowOptions): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const stateDir = node.simulated?.stateDir ?? o.upStateDir;
  const virtctlBin = await ensureVirtctl();
  const virtctl = async (...args: string[]) => {
    const r = await runVirtctl(virtctlBin, [`--kubeconfig=${o.tenantKubeconfig}`, `--namespace=${namespace}`, ...args]);
    t.equal(r.code, 0, `virtctl ${args.join(' ')}: ${r.stderr.trim()}`);
  };
  const claimOf = (name: string) => tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace });
  const volumeFile = async (claim: string) => {
    const pv = await admin.core.readPersistentVolume({ name: (await claimOf(claim)).spec!.volumeName! });
    return { pv: pv.metadata!.name!, file: join(stateDir, 'csi', 'volumes', `${pv.spec!.csi!.volumeHandle}.img`) };
  };
  /** A file inside a filesystem volume's bytes on the node (the VM not running). */
  const fileIn = async (volume: string, path: string, bytes: number) =>
    (await node.exec(['sh', '-c', `debugfs -R 'cat ${path}' ${volume} 2>/dev/null | head -c ${bytes}`])).stdout;
  /** Runs `script` in VM `name`'s guest once it runs; `$d` is the data disk where `data`. */
  const guest = async (name: string, script: string, data = true): Promise<string> => {
    const vmi = await waitFor(virtualMachineInstances(tenant, namespace, { name }), (v) => v.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: o.bootDeadlineMs,
    });
    const [pod] = (await tenant.core.listNamespacedPod({ namespace, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` })).items;
    const find = data
      ? `d=; for b in /sys/block/vd*; do [ "$(cat $b/size)" = ${DATA_SECTORS} ] && d=/dev/\${b##*/}; done; [ -n "$d" ]; `
      : '';
    const r = await poll(
      `${name}'s guest agent runs the script`,
      () => o.kubectl(['exec', pod!.metadata!.name!, '--', '/bin/sh', '-c', find + script]),
      (x) => x.code === 0,
      { deadlineMs: o.bootDeadlineMs, intervalMs: 2000 },
    );
    return r.stdout.trim();
  };
  const stopped = async (name: string) => {
    await virtctl('stop', name);
    await waitForGone(virtualMachineInstances(tenant, namespace, { name }), { deadlineMs: DEADLINE_MS });
  };

  // The registry source's secret: the node reads it through the launcher pod that references it.
  await tenant.core.createNamespacedSecret({
    namespace,
    body: { metadata: { name: 'pull' }, stringData: { accessKeyId: 'tenant', secretKey: randomBytes(8).toString('hex') } },
  });
  const root = {
    source: { registry: { url: `docker://${TEST_GUEST_IMAGE}`, secretRef: 'pull' } },
    storage: { resources: { requests: { storage: ROOT_SIZE } } },
  };
  await tenant.custom.createNamespacedCustomObject({ ...VMS, namespace, body: vmOnDataVolumes('dv-vm', node.name, root, true) });
  const marker = `dv-marker-${randomBytes(4).toString('hex')}`;
  await guest('dv-vm', `printf ${marker} > $d; sync`);

  const vm = (await tenant.custom.getNamespacedCustomObject({ ...VMS, namespace, name: 'dv-vm' })) as VirtualMachine;
  const succeeded = (name: string) =>
    waitFor(dataVolumes(tenant, namespace, { name }), (d) => d.status?.phase === 'Succeeded', {
      what: 'Succeeded',
      deadlineMs: DEADLINE_MS,
    });
  const [rootDv, dataDv] = await Promise.all([succeeded('dv-vm-root'), succeeded('dv-vm-data')]);
  const owned = { owner: [{ kind: 'VirtualMachine', name: 'dv-vm', uid: vm.metadata.uid, controller: true }] };
  const done = (claimName: string) => ({
    phase: 'Succeeded',
    progress: '100.0%',
    claimName,
    conditions: [
      { type: 'Bound', status: 'True', reason: 'Bound' },
      { type: 'Ready', status: 'True' },
      { type: 'Running', status: 'False', reason: 'Completed' },
    ],
  });
  t.match(
    {
      root: { status: rootDv.status, owner: rootDv.metadata.ownerReferences },
      data: { status: dataDv.status, owner: dataDv.metadata.ownerReferences },
      report: importReportOf((await claimOf('dv-vm-root')).status?.conditions),
      rootSize: (await claimOf('dv-vm-root')).status?.capacity?.storage,
    },
    {
      root: { status: done('dv-vm-root'), ...owned },
      data: { status: done('dv-vm-data'), ...owned },
      report: { phase: 'Succeeded', progress: '100.00%' },
      rootSize: ROOT_SIZE,
    },
    `the VM's DataVolumes are the VM's: its root imported from ${TEST_GUEST_IMAGE} on ${node.name} with the tenant's pull secret, and its blank data disk, both Succeeded`,
  );
  const reasons = async (name: string) =>
    (
      await tenant.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.kind=DataVolume,involvedObject.name=${name}` })
    ).items.map((e) => e.reason);
  const seen = [...(await reasons('dv-vm-root')), ...(await reasons('dv-vm-data'))];
  t.ok(
    ['Pending', 'Bound', 'ImportSucceeded'].every((r) => seen.includes(r)),
    `CDI's events on the DataVolumes: ${seen.join(', ')}`,
  );

  // While the node's pod uses the root claim: what the node itself may write, and a node-local URL.
  await importBoundaries(t, { ...o, usedClaim: 'dv-vm-root' });

  await stopped('dv-vm');
  const rootVolume = await volumeFile('dv-vm-root');
  // debugfs does not replay the journal: the marker shows once the volume is unstaged (unmounted) after a stop.
  const importMarker = () =>
    poll(
      'the import marker in the unstaged root volume',
      () => fileIn(rootVolume.file, '/.vkvm-imported', 200),
      (m) => m !== '',
      {
        deadlineMs: 60_000,
        intervalMs: 1000,
      },
    );
  const imported = await importMarker();
  await virtctl('start', 'dv-vm');
  t.equal(await guest('dv-vm', `head -c ${marker.length} $d`), marker, 'after virtctl stop and start the guest reads its marker back');

  const before = await waitFor(virtualMachineInstances(tenant, namespace, { name: 'dv-vm' }), (v) => v.status?.phase === 'Running', {
    what: 'Running',
  });
  await node.restartAgent!();
  await virtctl('restart', 'dv-vm');
  // The restart makes a new VMI: read from that one, not the old one on its way out.
  await waitFor(
    virtualMachineInstances(tenant, namespace, { name: 'dv-vm' }),
    (v) => v.metadata.uid !== before.metadata.uid && v.status?.phase === 'Running',
    { what: 'a new VMI Running', deadlineMs: o.bootDeadlineMs },
  );
  t.equal(
    await guest('dv-vm', `head -c ${marker.length} $d`),
    marker,
    "after the node's agent restarted and virtctl restart the guest reads its marker back",
  );
  await stopped('dv-vm');
  t.match(
    { imported, after: await importMarker() },
    { imported: /"importedAt"/, after: imported },
    'the root volume was imported once: three boots, one import marker',
  );

  // A second VM from a clone of the first one's root volume: on its node, of its size, and it boots.
  await tenant.custom.createNamespacedCustomObject({
    ...VMS,
    namespace,
    body: vmOnDataVolumes('dv-vm2', node.name, { source: { pvc: { name: 'dv-vm-root' } }, storage: {} }, false),
  });
  t.equal(await guest('dv-vm2', 'echo booted', false), 'booted', "a second VM boots from a clone of the first VM's root volume");
  const clone = await succeeded('dv-vm2-root');
  const cloneClaim = await claimOf('dv-vm2-root');
  t.match(
    {
      phase: clone.status?.phase,
      dataSource: cloneClaim.spec?.dataSource,
      selectedNode: cloneClaim.metadata?.annotations?.['volume.kubernetes.io/selected-node'],
      capacity: cloneClaim.status?.capacity?.storage,
    },
    { phase: 'Succeeded', dataSource: { kind: 'PersistentVolumeClaim', name: 'dv-vm-root' }, selectedNode: node.name, capacity: ROOT_SIZE },
    `the clone is made on ${node.name}, where its source lives, of the source's size`,
  );
  const cloned = await waitFor(
    events(tenant, namespace, { fieldSelector: 'involvedObject.name=dv-vm2-root,reason=CloneSucceeded' }),
    () => true,
    {
      what: 'CloneSucceeded',
    },
  );
  t.match(cloned.message, `Successfully cloned from ${namespace}/dv-vm-root into ${namespace}/dv-vm2-root`, 'CDI’s clone event');

  // A snapshot of the data volume, restored into a new claim on its node, holds the guest's marker.
  const snap: Snapshot = await snapshotOf(t, { ...o, claim: 'dv-vm-data', restoreInto: 'dv-restored' });
  t.equal(
    await fileIn(snap.restoredFile, '/disk.img', marker.length),
    marker,
    "the claim restored from the data volume's snapshot holds the guest's marker",
  );
  await snapshotBoundaries(t, { tenant, namespace, snapshotHandle: snap.snapshotHandle });

  // Everything deleted: DataVolumes, claims, volumes, the snapshot and its content, attachments, the node's paths.
  const volumes = [rootVolume, await volumeFile('dv-vm-data'), await volumeFile('dv-vm2-root')];
  const pvs = [...volumes.map((v) => v.pv), snap.restoredPv];
  const files = [...volumes.map((v) => v.file), snap.restoredFile, snap.snapshotFile];
  await snap.remove();
  for (const name of ['dv-vm', 'dv-vm2']) await tenant.custom.deleteNamespacedCustomObject({ ...VMS, namespace, name });
  await tenant.core.deleteNamespacedSecret({ name: 'pull', namespace });
  await waitForGone(dataVolumes(tenant, namespace, {}), { deadlineMs: DEADLINE_MS });
  await waitForGone(persistentVolumeClaims(tenant, namespace, {}), { deadlineMs: DEADLINE_MS });
  const storage = admin.kc.makeApiClient(StorageV1Api);
  const left = async () => {
    const pvNames = new Set((await admin.core.listPersistentVolume()).items.map((p) => p.metadata!.name!));
    const attached = (await storage.listVolumeAttachment()).items.filter((a) => pvs.includes(a.spec.source.persistentVolumeName ?? ''));
    const onNode = (
      await node.exec([
        'sh',
        '-c',
        `grep -c ${stateDir}/p /proc/self/mountinfo; find ${stateDir}/pods ${stateDir}/plugins/kubernetes.io/csi -name vol_data.json 2>/dev/null | wc -l; ls ${files.join(' ')} 2>/dev/null | wc -l`,
      ])
    ).stdout
      .trim()
      .split('\n');
    return { pvs: pvs.filter((p) => pvNames.has(p)), attachments: attached.length, mounts: onNode[0], staged: onNode[1], files: onNode[2] };
  };
  const nothing = { pvs: [], attachments: 0, mounts: '0', staged: '0', files: '0' };
  t.same(
    await poll('nothing of the volumes left', left, (l) => JSON.stringify(l) === JSON.stringify(nothing), {
      deadlineMs: DEADLINE_MS,
    }).catch(left),
    nothing,
    'the VMs, snapshot and claim deleted: no DataVolume, claim, PV, VolumeAttachment, volume or snapshot file, mount or staging record left',
  );
}

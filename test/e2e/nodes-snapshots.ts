// The multi-node suite's (multi-node/nodes.ts) snapshot subtest: on `vkvm up --nodes 2`, each vkvm node
// runs csi-snapshotter beside its driver and the cluster one
// snapshot-controller (--enable-distributed-snapshotting). A tenant (edit in
// one namespace) snapshots a claim on node 2 and restores the snapshot into a
// new claim there: a snapshot lives on its volume's node, so the restore is
// provisioned on that node (the selected-node annotation set as the
// scheduler sets it for a first pod pinned there).
import { join } from 'node:path';
import type { Test } from 'tap';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import { apiOutcome, poll, type UpNode } from './framework/index.js';

const CLASS = 'vkvm-local';
const DRIVER = 'csi.vkvm.io';
const CLAIM_SIZE = '64Mi';
const DEADLINE_MS = 120_000;
const SNAPSHOTS = { group: 'snapshot.storage.k8s.io', version: 'v1' } as const;
// Written into the volume's bytes on the node (past the first block), read back from the restored volume's.
const MARKER = 'vkvm-snapshot-marker-7f3a';
const MARKER_OFFSET_BLOCKS = 8; // of 512 bytes: 4 KiB in

interface VolumeSnapshot {
  spec?: { volumeSnapshotClassName?: string };
  status?: { readyToUse?: boolean; boundVolumeSnapshotContentName?: string; error?: { message?: string } };
}
interface VolumeSnapshotContent {
  metadata?: { labels?: Record<string, string> };
  spec?: { driver?: string; deletionPolicy?: string; source?: { volumeHandle?: string } };
  status?: { snapshotHandle?: string; readyToUse?: boolean };
}

/** Until the claim is Bound on `node` (selected as the scheduler selects it); its PV's name and volume file. */
async function bindOn(o: { admin: KubeClients; tenant: KubeClients; namespace: string; node: UpNode; csiDir: string }, name: string) {
  await o.admin.core.patchNamespacedPersistentVolumeClaim(
    { name, namespace: o.namespace, body: { metadata: { annotations: { 'volume.kubernetes.io/selected-node': o.node.name } } } },
    mergePatch,
  );
  const bound = await poll(
    `${name} Bound`,
    () => o.tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace: o.namespace }),
    (c) => c.status?.phase === 'Bound',
    { deadlineMs: DEADLINE_MS },
  );
  const pv = await o.admin.core.readPersistentVolume({ name: bound.spec!.volumeName! });
  return {
    pv: pv.metadata!.name!,
    handle: pv.spec!.csi!.volumeHandle,
    file: join(o.csiDir, 'volumes', `${pv.spec!.csi!.volumeHandle}.img`),
  };
}

const gone = (read: () => Promise<unknown>) => async () => (await apiOutcome(read)).code === 404;

export async function snapshotRestoredOnItsNode(
  t: Test,
  o: { admin: KubeClients; tenant: KubeClients; namespace: string; node: UpNode; upStateDir: string },
): Promise<void> {
  const { admin, tenant, namespace, node } = o;
  const csiDir = join(node.simulated?.stateDir ?? o.upStateDir, 'csi');
  const on = { ...o, csiDir };
  const snapshots = { ...SNAPSHOTS, namespace, plural: 'volumesnapshots' };
  const contents = { ...SNAPSHOTS, plural: 'volumesnapshotcontents' };

  await tenant.core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: { metadata: { name: 'snap-source' }, spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: CLAIM_SIZE } } } },
  });
  const source = await bindOn(on, 'snap-source');
  const write = await node.exec([
    'sh',
    '-c',
    `printf %s ${MARKER} | dd of=${source.file} bs=512 seek=${MARKER_OFFSET_BLOCKS} conv=notrunc status=none`,
  ]);
  t.equal(write.code, 0, `the marker written into ${source.pv}'s bytes on ${node.name}`);

  await tenant.custom.createNamespacedCustomObject({
    ...snapshots,
    body: {
      apiVersion: 'snapshot.storage.k8s.io/v1',
      kind: 'VolumeSnapshot',
      metadata: { name: 'snap' },
      spec: { source: { persistentVolumeClaimName: 'snap-source' } },
    },
  });
  const snap = (await poll(
    'the VolumeSnapshot readyToUse',
    () => tenant.custom.getNamespacedCustomObject({ ...snapshots, name: 'snap' }),
    (s) => (s as VolumeSnapshot).status?.readyToUse === true,
    { deadlineMs: DEADLINE_MS },
  )) as VolumeSnapshot;
  const contentName = snap.status!.boundVolumeSnapshotContentName!;
  const content = (await admin.custom.getClusterCustomObject({ ...contents, name: contentName })) as VolumeSnapshotContent;
  const snapshotFile = join(csiDir, 'snapshots', `${content.status?.snapshotHandle}.img`);
  t.match(
    {
      class: snap.spec?.volumeSnapshotClassName,
      driver: content.spec?.driver,
      deletionPolicy: content.spec?.deletionPolicy,
      of: content.spec?.source?.volumeHandle,
      managedBy: content.metadata?.labels?.['snapshot.storage.kubernetes.io/managed-by'],
      handle: content.status?.snapshotHandle,
      file: (await node.exec(['test', '-f', snapshotFile])).code,
    },
    { class: CLASS, driver: DRIVER, deletionPolicy: 'Delete', of: source.handle, managedBy: node.name, handle: /^snap-/, file: 0 },
    `the snapshot (default class) is ready, handed to ${node.name}'s snapshotter, and its file is on ${node.name}`,
  );

  await tenant.core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: {
      metadata: { name: 'snap-restored' },
      spec: {
        accessModes: ['ReadWriteOnce'],
        resources: { requests: { storage: CLAIM_SIZE } },
        dataSource: { apiGroup: SNAPSHOTS.group, kind: 'VolumeSnapshot', name: 'snap' },
      },
    },
  });
  const restored = await bindOn(on, 'snap-restored');
  const read = await node.exec(['dd', `if=${restored.file}`, 'bs=512', `skip=${MARKER_OFFSET_BLOCKS}`, 'count=1', 'status=none']);
  t.equal(read.stdout.slice(0, MARKER.length), MARKER, `the claim restored from the snapshot on ${node.name} holds the marker`);

  const contentBody = {
    apiVersion: 'snapshot.storage.k8s.io/v1',
    kind: 'VolumeSnapshotContent',
    metadata: { name: 'mine' },
    spec: {
      driver: DRIVER,
      deletionPolicy: 'Retain',
      source: { snapshotHandle: content.status!.snapshotHandle },
      volumeSnapshotRef: { name: 'stolen', namespace },
    },
  };
  t.match(
    {
      content: await apiOutcome(() => tenant.custom.createClusterCustomObject({ ...contents, body: contentBody })),
      class: await apiOutcome(() =>
        tenant.custom.createClusterCustomObject({
          ...SNAPSHOTS,
          plural: 'volumesnapshotclasses',
          body: {
            apiVersion: 'snapshot.storage.k8s.io/v1',
            kind: 'VolumeSnapshotClass',
            metadata: { name: 'mine' },
            driver: DRIVER,
            deletionPolicy: 'Retain',
          },
        }),
      ),
    },
    { content: { code: 403 }, class: { code: 403 } },
    'the tenant may create neither a VolumeSnapshotContent nor a VolumeSnapshotClass',
  );

  await tenant.custom.deleteNamespacedCustomObject({ ...snapshots, name: 'snap' });
  for (const name of ['snap-source', 'snap-restored']) await tenant.core.deleteNamespacedPersistentVolumeClaim({ name, namespace });
  await poll(
    'the VolumeSnapshotContent deleted',
    gone(() => admin.custom.getClusterCustomObject({ ...contents, name: contentName })),
    Boolean,
    {
      deadlineMs: DEADLINE_MS,
    },
  );
  for (const v of [source, restored])
    await poll(
      `${v.pv} deleted`,
      gone(() => admin.core.readPersistentVolume({ name: v.pv })),
      Boolean,
      { deadlineMs: DEADLINE_MS },
    );
  const left = await node.exec(['sh', '-c', `ls ${snapshotFile} ${source.file} ${restored.file} 2>/dev/null; true`]);
  t.equal(left.stdout, '', 'deleting the snapshot and the claims deleted the content, the PVs, and the snapshot and volume files');
}

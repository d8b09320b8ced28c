// The DataVolume flow's (nodes-datavolume-flow.ts) snapshot steps: on `vkvm up --nodes 2`, each vkvm node
// runs csi-snapshotter beside its driver and the cluster one
// snapshot-controller (--enable-distributed-snapshotting). A tenant (edit in
// one namespace) snapshots a claim on a node and restores the snapshot into a
// new claim there: a snapshot lives on its volume's node, so the restore is
// provisioned on that node (the selected-node annotation set as the
// scheduler sets it for a first pod pinned there).
import { join } from 'node:path';
import type { Test } from 'tap';
import { mergePatch, type KubeClients } from '../../provider/kube/client.js';
import { apiOutcome, poll, type UpNode } from './framework/index.js';

const CLASS = 'vkvm-local';
const DRIVER = 'csi.vkvm.io';
const DEADLINE_MS = 120_000;
const SNAPSHOTS = { group: 'snapshot.storage.k8s.io', version: 'v1' } as const;

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

/** A ready snapshot and the claim restored from it, on the snapshotted claim's node. */
export interface Snapshot {
  snapshotHandle: string;
  /** The snapshot's file on the node. */
  snapshotFile: string;
  restoredPv: string;
  /** The restored volume's file on the node. */
  restoredFile: string;
  /** Deletes the snapshot and the restored claim; resolves once the VolumeSnapshotContent is gone. */
  remove(): Promise<void>;
}

/** The tenant snapshots `claim` (bound on `node`) and restores it into the new claim `restoreInto` there. */
export async function snapshotOf(
  t: Test,
  o: { admin: KubeClients; tenant: KubeClients; namespace: string; node: UpNode; upStateDir: string; claim: string; restoreInto: string },
): Promise<Snapshot> {
  const { admin, tenant, namespace, node } = o;
  const csiDir = join(node.simulated?.stateDir ?? o.upStateDir, 'csi');
  const snapshots = { ...SNAPSHOTS, namespace, plural: 'volumesnapshots' };
  const contents = { ...SNAPSHOTS, plural: 'volumesnapshotcontents' };
  const source = await admin.core.readPersistentVolume({
    name: (await tenant.core.readNamespacedPersistentVolumeClaim({ name: o.claim, namespace })).spec!.volumeName!,
  });
  const name = `${o.claim}-snap`;
  await tenant.custom.createNamespacedCustomObject({
    ...snapshots,
    body: {
      apiVersion: 'snapshot.storage.k8s.io/v1',
      kind: 'VolumeSnapshot',
      metadata: { name },
      spec: { source: { persistentVolumeClaimName: o.claim } },
    },
  });
  const snap = (await poll(
    'the VolumeSnapshot readyToUse',
    () => tenant.custom.getNamespacedCustomObject({ ...snapshots, name }),
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
    {
      class: CLASS,
      driver: DRIVER,
      deletionPolicy: 'Delete',
      of: source.spec!.csi!.volumeHandle,
      managedBy: node.name,
      handle: /^snap-/,
      file: 0,
    },
    `the snapshot of ${o.claim} (default class) is ready, handed to ${node.name}'s snapshotter, and its file is on ${node.name}`,
  );

  const size = source.spec!.capacity!.storage!;
  await tenant.core.createNamespacedPersistentVolumeClaim({
    namespace,
    body: {
      metadata: { name: o.restoreInto },
      spec: {
        accessModes: ['ReadWriteOnce'],
        resources: { requests: { storage: size } },
        dataSource: { apiGroup: SNAPSHOTS.group, kind: 'VolumeSnapshot', name },
      },
    },
  });
  const restored = await bindOn({ ...o, csiDir }, o.restoreInto);
  return {
    snapshotHandle: content.status!.snapshotHandle!,
    snapshotFile,
    restoredPv: restored.pv,
    restoredFile: restored.file,
    async remove() {
      await tenant.custom.deleteNamespacedCustomObject({ ...snapshots, name });
      await tenant.core.deleteNamespacedPersistentVolumeClaim({ name: o.restoreInto, namespace });
      await poll(
        'the VolumeSnapshotContent deleted',
        gone(() => admin.custom.getClusterCustomObject({ ...contents, name: contentName })),
        Boolean,
        {
          deadlineMs: DEADLINE_MS,
        },
      );
    },
  };
}

/** What the tenant may not make from a snapshot handle it learned: a VolumeSnapshotContent of its own, or a class. */
export async function snapshotBoundaries(t: Test, o: { tenant: KubeClients; namespace: string; snapshotHandle: string }): Promise<void> {
  const contentBody = {
    apiVersion: 'snapshot.storage.k8s.io/v1',
    kind: 'VolumeSnapshotContent',
    metadata: { name: 'mine' },
    spec: {
      driver: DRIVER,
      deletionPolicy: 'Retain',
      source: { snapshotHandle: o.snapshotHandle },
      volumeSnapshotRef: { name: 'stolen', namespace: o.namespace },
    },
  };
  t.match(
    {
      content: await apiOutcome(() =>
        o.tenant.custom.createClusterCustomObject({ ...SNAPSHOTS, plural: 'volumesnapshotcontents', body: contentBody }),
      ),
      class: await apiOutcome(() =>
        o.tenant.custom.createClusterCustomObject({
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
}

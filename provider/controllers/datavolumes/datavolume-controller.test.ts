import t, { type Test } from 'tap';
import { pino } from 'pino';
import { ApiException, type V1PersistentVolumeClaim, type V1StorageClass } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import type { EventRecorder } from '../../kube/events.js';
import type { ClusterInformer } from '../../kube/informer.js';
import type { DataVolume } from '../../kubevirt/datavolume-types.js';
import { DataVolumeController } from './datavolume-controller.js';

function cache<T extends { metadata?: { name?: string; namespace?: string } }>(items: T[]) {
  const key = (o: T) => `${o.metadata!.namespace}/${o.metadata!.name}`;
  const map = new Map(items.map((o) => [key(o), o]));
  const handlers: Array<(o: T) => void> = [];
  return {
    put: (o: T) => map.set(key(o), o),
    remove: (o: T) => map.delete(key(o)),
    /** A watch event: the object is cached and the handlers see it. */
    change: (o: T) => {
      map.set(key(o), o);
      for (const h of handlers) h(o);
    },
    informer: {
      get: (k: string) => map.get(k),
      list: () => [...map.values()],
      onChange: (h: (o: T) => void) => void handlers.push(h),
    } as unknown as ClusterInformer<T>,
  };
}

/** The API calls the controller makes, and what they return; `classes`: the StorageClasses that exist (default: any). */
function fakeClients(calls: unknown[], classes?: Set<string>) {
  return {
    core: {
      createNamespacedPersistentVolumeClaim: async ({ body }: { body: V1PersistentVolumeClaim }) => {
        calls.push(['createClaim', body.metadata?.name, body.metadata?.annotations]);
        return { ...body, spec: { ...body.spec, storageClassName: 'vkvm-local' }, status: { phase: 'Pending' } };
      },
      readPersistentVolume: async () => ({
        spec: {
          nodeAffinity: {
            required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'topology.vkvm.io/node', operator: 'In', values: ['n2'] }] }] },
          },
        },
      }),
    },
    storage: {
      readStorageClass: async ({ name }: { name: string }) => {
        if (classes && !classes.has(name)) throw new ApiException(404, 'not found', {}, {});
        return { volumeBindingMode: 'WaitForFirstConsumer' };
      },
    },
    custom: {
      patchNamespacedCustomObjectStatus: async (p: { name: string; body: { status: Record<string, unknown> } }) => {
        calls.push(['patchStatus', p.name, p.body.status.phase, p.body.status.progress]);
        return { metadata: { resourceVersion: '' } };
      },
    },
  } as unknown as KubeClients;
}

/** The controller under test over these informers, stopped at the test's end; `onEvent` gets each event's reason and message. */
function startController(
  t: Test,
  o: {
    clients: KubeClients;
    dataVolumes: ClusterInformer<DataVolume>;
    claims: ClusterInformer<V1PersistentVolumeClaim>;
    storageClasses?: ClusterInformer<V1StorageClass>;
    onEvent?: (reason: string, message: string) => void;
    missingVolumeResyncMs?: number;
  },
): DataVolumeController {
  const controller = new DataVolumeController({
    clients: o.clients,
    dataVolumes: o.dataVolumes,
    claims: o.claims,
    storageClasses: o.storageClasses ?? cache<V1StorageClass>([]).informer,
    events: { record: () => undefined, recordFor: (_o, _t, reason, message) => o.onEvent?.(reason, message) } as EventRecorder,
    log: pino({ level: 'silent' }),
    ...(o.missingVolumeResyncMs !== undefined ? { missingVolumeResyncMs: o.missingVolumeResyncMs } : {}),
  });
  t.teardown(() => controller.stop());
  return controller;
}

const dv = (name: string, source: DataVolume['spec']['source']): DataVolume => ({
  metadata: { name, namespace: 'ns', uid: `${name}-uid`, resourceVersion: '1' },
  spec: { source, storage: { resources: { requests: { storage: '1Gi' } } } },
});

t.test('a DataVolume gets its claim and a status; a claim already made is read, not made again', async (t) => {
  const calls: unknown[] = [];
  const events: string[] = [];
  const dataVolumes = cache<DataVolume>([dv('blank', { blank: {} })]);
  const claims = cache<V1PersistentVolumeClaim>([]);
  const controller = startController(t, {
    clients: fakeClients(calls),
    dataVolumes: dataVolumes.informer,
    claims: claims.informer,
    onEvent: (reason) => void events.push(reason),
  });

  await controller.syncDataVolume('ns/blank');
  t.same(calls, [
    ['createClaim', 'blank', { 'cdi.kubevirt.io/storage.import.source': 'none' }],
    ['patchStatus', 'blank', 'WaitForFirstConsumer', 'N/A'],
  ]);
  t.same(events, ['Pending'], "the Bound condition's first state is an event, as CDI records it");

  calls.length = 0;
  events.length = 0;
  claims.put({
    metadata: {
      name: 'blank',
      namespace: 'ns',
      ownerReferences: [{ apiVersion: 'cdi.kubevirt.io/v1beta1', kind: 'DataVolume', name: 'blank', uid: 'blank-uid', controller: true }],
    },
    spec: { storageClassName: 'vkvm-local' },
    status: { phase: 'Bound' },
  });
  dataVolumes.put({
    ...dv('blank', { blank: {} }),
    metadata: { ...dv('blank', { blank: {} }).metadata, resourceVersion: '2' },
    status: { phase: 'WaitForFirstConsumer' },
  });
  await controller.syncDataVolume('ns/blank');
  t.same(calls, [['patchStatus', 'blank', 'Succeeded', '100.0%']], 'bound: Succeeded, and no second claim');
  t.same(events, ['Bound', 'ImportSucceeded']);
});

t.test("a clone's claim is made on its source's node; a claim of the name that is not the DataVolume's is left alone", async (t) => {
  const calls: unknown[] = [];
  const events: string[] = [];
  const dataVolumes = cache<DataVolume>([dv('clone', { pvc: { name: 'golden' } }), dv('taken', { blank: {} })]);
  const claims = cache<V1PersistentVolumeClaim>([
    { metadata: { name: 'golden', namespace: 'ns' }, spec: { volumeName: 'pv-golden' }, status: { phase: 'Bound' } },
    { metadata: { name: 'taken', namespace: 'ns' }, status: { phase: 'Bound' } },
  ]);
  const controller = startController(t, {
    clients: fakeClients(calls),
    dataVolumes: dataVolumes.informer,
    claims: claims.informer,
    onEvent: (reason) => void events.push(reason),
  });
  await controller.syncDataVolume('ns/clone');
  await controller.syncDataVolume('ns/taken');
  t.same(calls, [
    ['createClaim', 'clone', { 'volume.kubernetes.io/selected-node': 'n2' }],
    ['patchStatus', 'clone', 'CloneInProgress', 'N/A'],
    ['patchStatus', 'taken', 'Pending', 'N/A'],
  ]);
  t.same(events, ['Pending', 'CloneInProgress', 'ErrResourceExists'], 'a claim not its own is a Warning once, not adopted');
});

t.test('a DataVolume waiting on a missing class leaves Pending once the class appears (its watch event requeues it)', async (t) => {
  const calls: unknown[] = [];
  const classes = new Set<string>();
  const local = { ...dv('alpine-dv', { blank: {} }), spec: { source: { blank: {} }, pvc: { storageClassName: 'local' } } };
  const dataVolumes = cache<DataVolume>([local]);
  const claims = cache<V1PersistentVolumeClaim>([
    {
      metadata: {
        name: 'alpine-dv',
        namespace: 'ns',
        ownerReferences: [
          { apiVersion: 'cdi.kubevirt.io/v1beta1', kind: 'DataVolume', name: 'alpine-dv', uid: 'alpine-dv-uid', controller: true },
        ],
      },
      spec: { storageClassName: 'local' },
      status: { phase: 'Pending' },
    },
    { metadata: { name: 'other', namespace: 'ns' }, spec: { storageClassName: 'vkvm-local' }, status: { phase: 'Pending' } },
  ]);
  const storageClasses = cache<V1StorageClass>([]);
  const controller = startController(t, {
    clients: fakeClients(calls, classes),
    dataVolumes: dataVolumes.informer,
    claims: claims.informer,
    storageClasses: storageClasses.informer,
  });
  controller.start();
  const patched = async (n: number) => {
    for (let i = 0; i < 200 && calls.length < n; i++) await new Promise((r) => setTimeout(r, 5));
    return calls.slice(0, n);
  };
  t.same(await patched(1), [['patchStatus', 'alpine-dv', 'Pending', 'N/A']], 'no class local: Pending');
  dataVolumes.put({ ...local, metadata: { ...local.metadata, resourceVersion: '2' }, status: { phase: 'Pending' } });

  classes.add('local');
  storageClasses.change({ metadata: { name: 'vkvm-local' }, provisioner: 'csi.vkvm.io' });
  storageClasses.change({ metadata: { name: 'local' }, provisioner: 'csi.vkvm.io' });
  t.same(
    await patched(2),
    [
      ['patchStatus', 'alpine-dv', 'Pending', 'N/A'],
      ['patchStatus', 'alpine-dv', 'WaitForFirstConsumer', 'N/A'],
    ],
    'the class made: the DataVolume is synced again and waits for its first consumer',
  );
});

t.test(
  'a clone from another namespace whose claim exists is not judged again (a policy re-applied later fails no made clone)',
  async (t) => {
    const calls: unknown[] = [];
    const made = { ...dv('xclone', { pvc: { name: 'golden', namespace: 'images' } }) };
    const claims = cache<V1PersistentVolumeClaim>([
      { metadata: { name: 'golden', namespace: 'images' }, spec: { volumeName: 'pv-golden' }, status: { phase: 'Bound' } },
      {
        metadata: {
          name: 'xclone',
          namespace: 'ns',
          ownerReferences: [
            { apiVersion: 'cdi.kubevirt.io/v1beta1', kind: 'DataVolume', name: 'xclone', uid: 'xclone-uid', controller: true },
          ],
        },
        spec: { volumeName: 'pvc-staging' },
        status: { phase: 'Bound' },
      },
    ]);
    // No admissionregistration client: reading the policies would throw.
    const controller = startController(t, {
      clients: fakeClients(calls),
      dataVolumes: cache<DataVolume>([made]).informer,
      claims: claims.informer,
    });
    await controller.syncDataVolume('ns/xclone');
    t.same(calls, [['patchStatus', 'xclone', 'Succeeded', '100.0%']], 'its bound claim makes it Succeeded, with no policy read');
  },
);

t.test("a cross-namespace clone that cannot go on is told on the DataVolume's events, not only in the log", async (t) => {
  const events: string[] = [];
  const clone: DataVolume = {
    ...dv('xclone', { pvc: { name: 'golden', namespace: 'images' } }),
    metadata: { ...dv('xclone', {}).metadata, creationTimestamp: '2026-02-01T00:00:00Z' },
  };
  const claims = cache<V1PersistentVolumeClaim>([
    { metadata: { name: 'golden', namespace: 'images' }, spec: { volumeName: 'pv-golden' }, status: { phase: 'Bound' } },
    // Bound by a user of the source namespace to a volume not provisioned for it.
    {
      metadata: { name: 'vkvm-clone-xclone-uid', namespace: 'images', uid: 'st-uid', annotations: { 'vkvm.io/clone-for': 'ns/xclone' } },
      spec: { volumeName: 'pv-of-someone' },
      status: { phase: 'Bound' },
    },
  ]);
  const clients = fakeClients([]);
  // The clone-source policy and its binding, in force long before the DataVolume was made.
  (clients as unknown as { objects: unknown }).objects = {
    read: async () => ({ metadata: { creationTimestamp: '2026-01-01T00:00:00Z' } }),
  };
  const controller = startController(t, {
    clients,
    dataVolumes: cache<DataVolume>([clone]).informer,
    claims: claims.informer,
    onEvent: (reason, message) => void events.push(`${reason}: ${message}`),
  });
  await t.rejects(controller.syncDataVolume('ns/xclone'), /not the staging claim vkvm made/);
  t.match(events, [/^ErrClaimNotValid: Error cloning into PVC xclone: claim images\/vkvm-clone-xclone-uid is not the staging claim/]);
});

/** DataVolume ns/xclone's own claim, made naming the cloned volume pvc-st-uid and not bound yet. */
const xcloneClaimPending: V1PersistentVolumeClaim = {
  metadata: {
    name: 'xclone',
    namespace: 'ns',
    uid: 'claim-uid',
    ownerReferences: [{ apiVersion: 'cdi.kubevirt.io/v1beta1', kind: 'DataVolume', name: 'xclone', uid: 'xclone-uid', controller: true }],
  },
  spec: { volumeName: 'pvc-st-uid' },
  status: { phase: 'Pending' },
};

t.test(
  'a cross-namespace clone: CloneInProgress while its staging claim fills; Failed with one ErrClaimNotValid once that claim is deleted before the move',
  async (t) => {
    const calls: unknown[] = [];
    const events: string[] = [];
    const clone: DataVolume = {
      ...dv('xclone', { pvc: { name: 'golden', namespace: 'images' } }),
      metadata: { ...dv('xclone', {}).metadata, creationTimestamp: '2026-02-01T00:00:00Z' },
    };
    const dataVolumes = cache<DataVolume>([clone]);
    const staging: V1PersistentVolumeClaim = {
      metadata: {
        name: 'vkvm-clone-xclone-uid',
        namespace: 'images',
        uid: 'st-uid',
        annotations: { 'vkvm.io/clone-for': 'ns/xclone', 'volume.kubernetes.io/selected-node': 'n2' },
      },
      status: { phase: 'Pending' },
    };
    const claims = cache<V1PersistentVolumeClaim>([
      { metadata: { name: 'golden', namespace: 'images' }, spec: { volumeName: 'pv-golden' }, status: { phase: 'Bound' } },
      staging,
    ]);
    const clients = fakeClients(calls);
    (clients as unknown as { objects: unknown }).objects = {
      read: async () => ({ metadata: { creationTimestamp: '2026-01-01T00:00:00Z' } }),
    };
    const controller = startController(t, {
      clients,
      dataVolumes: dataVolumes.informer,
      claims: claims.informer,
      onEvent: (reason) => void events.push(reason),
    });
    await controller.syncDataVolume('ns/xclone');
    t.same(calls, [['patchStatus', 'xclone', 'CloneInProgress', 'N/A']], "the staging claim on the source's node: CloneInProgress");

    // The DataVolume's claim made, naming the cloned volume; then a user of the source namespace deletes the staging claim.
    calls.length = 0;
    events.length = 0;
    claims.put(xcloneClaimPending);
    claims.remove(staging);
    dataVolumes.put({ ...clone, metadata: { ...clone.metadata, resourceVersion: '2' }, status: { phase: 'CloneInProgress' } });
    await controller.syncDataVolume('ns/xclone');
    t.same(calls, [['patchStatus', 'xclone', 'Failed', 'N/A']]);
    t.same(events, ['ErrClaimNotValid'], 'one Warning, not a Normal Bound event beside it');
  },
);

t.test(
  "a cross-namespace clone whose volume is not found while its staging claim is vkvm's: said (Warning, Bound condition), and moved once the volume appears",
  async (t) => {
    const calls: unknown[] = [];
    const events: string[] = [];
    const clone = dv('xclone', { pvc: { name: 'golden', namespace: 'images' } });
    const claims = cache<V1PersistentVolumeClaim>([
      { metadata: { name: 'golden', namespace: 'images' }, spec: { volumeName: 'pv-golden' }, status: { phase: 'Bound' } },
      {
        metadata: { name: 'vkvm-clone-xclone-uid', namespace: 'images', uid: 'st-uid', annotations: { 'vkvm.io/clone-for': 'ns/xclone' } },
        spec: { dataSource: { kind: 'PersistentVolumeClaim', name: 'golden' }, volumeName: 'pvc-st-uid' },
        status: { phase: 'Bound' },
      },
      xcloneClaimPending,
    ]);
    const clients = fakeClients(calls);
    const sourcePv = await clients.core.readPersistentVolume({ name: 'pv-golden' });
    let cloned: object | undefined;
    Object.assign(clients.core, {
      readPersistentVolume: async ({ name }: { name: string }) => {
        if (name === 'pv-golden') return sourcePv;
        if (!cloned) throw new ApiException(404, 'not found', {}, {});
        return cloned;
      },
      patchPersistentVolume: async ({ name }: { name: string }) => void calls.push(['patchPv', name]),
    });
    const controller = startController(t, {
      clients,
      dataVolumes: cache<DataVolume>([clone]).informer,
      claims: claims.informer,
      onEvent: (reason, message) => void events.push(`${reason}: ${message}`),
      missingVolumeResyncMs: 20,
    });
    controller.start();
    await controller.idle();
    t.match(calls, [['patchStatus', 'xclone', 'CloneInProgress', 'N/A']]);
    t.same(events.slice(0, 1), [
      'VolumeNotFound: PersistentVolume pvc-st-uid, cloned for PVC xclone, is not found; PVC xclone stays Pending until it exists',
    ]);
    // The volume appears; no watch event tells the controller: its own resync finds it.
    cloned = { metadata: { name: 'pvc-st-uid', resourceVersion: '9' }, spec: { claimRef: { uid: 'st-uid' } } };
    await new Promise((resolve) => setTimeout(resolve, 100));
    await controller.idle();
    t.ok(
      calls.some((c) => JSON.stringify(c) === JSON.stringify(['patchPv', 'pvc-st-uid'])),
      "the volume's claimRef moved to the DataVolume's claim",
    );
  },
);

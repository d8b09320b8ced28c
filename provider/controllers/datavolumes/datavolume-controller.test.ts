import t from 'tap';
import { pino } from 'pino';
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import type { EventRecorder } from '../../kube/events.js';
import type { ClusterInformer } from '../../kube/informer.js';
import type { DataVolume } from '../../kubevirt/datavolume-types.js';
import { DataVolumeController } from './datavolume-controller.js';

function cache<T extends { metadata?: { name?: string; namespace?: string } }>(items: T[]) {
  const key = (o: T) => `${o.metadata!.namespace}/${o.metadata!.name}`;
  const map = new Map(items.map((o) => [key(o), o]));
  return {
    put: (o: T) => map.set(key(o), o),
    informer: { get: (k: string) => map.get(k), list: () => [...map.values()], onChange: () => undefined } as unknown as ClusterInformer<T>,
  };
}

/** The API calls the controller makes, and what they return. */
function fakeClients(calls: unknown[]) {
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
    storage: { readStorageClass: async () => ({ volumeBindingMode: 'WaitForFirstConsumer' }) },
    custom: {
      patchNamespacedCustomObjectStatus: async (p: { name: string; body: { status: Record<string, unknown> } }) => {
        calls.push(['patchStatus', p.name, p.body.status.phase, p.body.status.progress]);
        return { metadata: { resourceVersion: '' } };
      },
    },
  } as unknown as KubeClients;
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
  const controller = new DataVolumeController({
    clients: fakeClients(calls),
    dataVolumes: dataVolumes.informer,
    claims: claims.informer,
    events: { record: () => undefined, recordFor: (_o, _t, reason) => void events.push(reason) } as EventRecorder,
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => controller.stop());

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
  const controller = new DataVolumeController({
    clients: fakeClients(calls),
    dataVolumes: dataVolumes.informer,
    claims: claims.informer,
    events: { record: () => undefined, recordFor: (_o, _t, reason) => void events.push(reason) } as EventRecorder,
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => controller.stop());
  await controller.syncDataVolume('ns/clone');
  await controller.syncDataVolume('ns/taken');
  t.same(calls, [
    ['createClaim', 'clone', { 'volume.kubernetes.io/selected-node': 'n2' }],
    ['patchStatus', 'clone', 'CloneInProgress', 'N/A'],
    ['patchStatus', 'taken', 'Pending', 'N/A'],
  ]);
  t.same(events, ['Pending', 'CloneInProgress', 'ErrResourceExists'], 'a claim not its own is a Warning once, not adopted');
});

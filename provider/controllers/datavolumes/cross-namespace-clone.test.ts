import t from 'tap';
import { pino } from 'pino';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import type { ClusterInformer } from '../../kube/informer.js';
import type { DataVolume } from '../../kubevirt/datavolume-types.js';
import { planClaim } from './claim-plan.js';
import { deleteStagingClaimsOf, syncCrossNamespaceClone } from './cross-namespace-clone.js';

const dv: DataVolume = {
  metadata: { name: 'disk', namespace: 'tenant', uid: 'dv-uid' },
  spec: { source: { pvc: { name: 'golden', namespace: 'images' } }, storage: {} },
};
const golden: V1PersistentVolumeClaim = {
  metadata: { name: 'golden', namespace: 'images' },
  spec: { volumeMode: 'Block', storageClassName: 'vkvm-local', resources: { requests: { storage: '8Mi' } } },
  status: { phase: 'Bound' },
};
const plan = planClaim({ dv, source: golden, cloneAdmitted: true });
if (plan.kind !== 'claim' || !plan.staging) throw new Error('an admitted clone from another namespace plans a staging claim');
const planned = { claim: plan.claim, staging: plan.staging };

/** The world the step reads (claims by namespace/name, one volume) and the writes it makes. */
function world(claims: V1PersistentVolumeClaim[], pv?: V1PersistentVolume) {
  const calls: unknown[] = [];
  const byKey = new Map(claims.map((c) => [`${c.metadata!.namespace}/${c.metadata!.name}`, c]));
  const informer = {
    get: (k: string) => byKey.get(k),
    list: () => [...byKey.values()],
  } as unknown as ClusterInformer<V1PersistentVolumeClaim>;
  const clients = {
    core: {
      createNamespacedPersistentVolumeClaim: async ({ namespace, body }: { namespace: string; body: V1PersistentVolumeClaim }) => {
        calls.push(['create', `${namespace}/${body.metadata?.name}`, body.spec?.volumeName]);
        return { ...body, metadata: { ...body.metadata, uid: 'claim-uid' }, status: { phase: 'Pending' } };
      },
      readPersistentVolume: async () => pv,
      patchPersistentVolume: async ({ name, body }: { name: string; body: unknown }) => void calls.push(['patchPv', name, body]),
      deleteNamespacedPersistentVolumeClaim: async ({ namespace, name }: { namespace: string; name: string }) =>
        void calls.push(['delete', `${namespace}/${name}`]),
    },
  } as unknown as KubeClients;
  return { calls, o: { clients, claims: informer, log: pino({ level: 'silent' }) } };
}

const staging = (phase: string, volumeName?: string): V1PersistentVolumeClaim => ({
  ...planned.staging,
  metadata: { ...planned.staging.metadata, uid: 'staging-uid' },
  spec: { ...planned.staging.spec, ...(volumeName ? { volumeName } : {}) },
  status: { phase },
});
const pvBoundTo = (uid: string): V1PersistentVolume => ({
  metadata: { name: 'pvc-staging-uid', resourceVersion: '7' },
  spec: { claimRef: { uid } },
});

t.test('first the staging claim is made in the source namespace; nothing more while it is not bound', async (t) => {
  const empty = world([]);
  t.same(await syncCrossNamespaceClone(empty.o, planned, undefined), { kind: 'staging' });
  t.same(empty.calls, [['create', 'images/vkvm-clone-dv-uid', undefined]]);
  const pending = world([staging('Pending')]);
  t.same(
    await syncCrossNamespaceClone(pending.o, planned, undefined),
    { kind: 'staging', staging: staging('Pending') },
    'the staging claim, for the status',
  );
  t.same(pending.calls, []);
});

t.test(
  "once the staging claim is bound, the DataVolume's claim names its volume and the volume's claimRef moves to it (at the version read)",
  async (t) => {
    const w = world([staging('Bound', 'pvc-staging-uid')], pvBoundTo('staging-uid'));
    const step = await syncCrossNamespaceClone(w.o, planned, undefined);
    t.equal(step.kind === 'claim' && step.claim.spec?.volumeName, 'pvc-staging-uid');
    t.same(w.calls, [
      ['create', 'tenant/disk', 'pvc-staging-uid'],
      [
        'patchPv',
        'pvc-staging-uid',
        {
          metadata: { resourceVersion: '7' },
          spec: {
            claimRef: {
              apiVersion: 'v1',
              kind: 'PersistentVolumeClaim',
              namespace: 'tenant',
              name: 'disk',
              uid: 'claim-uid',
              resourceVersion: null,
            },
          },
        },
      ],
    ]);
  },
);

t.test('once the claim is bound, the staging claim is deleted; a volume already moved is not patched again', async (t) => {
  const ownClaim = { ...planned.claim, metadata: { ...planned.claim.metadata, uid: 'claim-uid' }, spec: { volumeName: 'pvc-staging-uid' } };
  const moved = world([staging('Lost', 'pvc-staging-uid')], pvBoundTo('claim-uid'));
  await syncCrossNamespaceClone(moved.o, planned, { ...ownClaim, status: { phase: 'Pending' } });
  t.same(moved.calls, [], 'waits for the PV controller to bind the claim');
  const bound = world([staging('Lost', 'pvc-staging-uid')], pvBoundTo('claim-uid'));
  await syncCrossNamespaceClone(bound.o, planned, { ...ownClaim, status: { phase: 'Bound' } });
  t.same(bound.calls, [['delete', 'images/vkvm-clone-dv-uid']]);
});

t.test('a staging claim bound to a volume not provisioned for it (a user of the source namespace bound it) is not taken', async (t) => {
  const w = world([staging('Bound', 'pv-of-someone')], pvBoundTo('staging-uid'));
  await t.rejects(syncCrossNamespaceClone(w.o, planned, undefined), /is not the staging claim vkvm made/);
  t.same(w.calls, [], "no claim is made for another volume, and no volume's claimRef moves");
});

t.test("a DataVolume gone: its staging claims are deleted, no one else's", async (t) => {
  const other = { metadata: { name: 'vkvm-clone-x', namespace: 'images', annotations: { 'vkvm.io/clone-for': 'tenant/other' } } };
  const w = world([staging('Bound', 'pvc-staging-uid'), other, golden]);
  await deleteStagingClaimsOf(w.o, 'tenant/disk');
  t.same(w.calls, [['delete', 'images/vkvm-clone-dv-uid']]);
});

t.test('a DataVolume made again under its name: the earlier one’s staging claim is deleted, its own kept', async (t) => {
  const earlier = { metadata: { name: 'vkvm-clone-old-uid', namespace: 'images', annotations: { 'vkvm.io/clone-for': 'tenant/disk' } } };
  const w = world([staging('Bound', 'pvc-staging-uid'), earlier, golden]);
  await deleteStagingClaimsOf(w.o, 'tenant/disk', 'vkvm-clone-dv-uid');
  t.same(w.calls, [['delete', 'images/vkvm-clone-old-uid']]);
});

/** The DataVolume's claim, made naming the staging claim's volume, not bound yet. */
const madePending: V1PersistentVolumeClaim = {
  ...planned.claim,
  metadata: { ...planned.claim.metadata, uid: 'claim-uid' },
  spec: { volumeName: 'pvc-staging-uid' },
  status: { phase: 'Pending' },
};

t.test('the staging claim deleted before its volume moved: the clone failed, saying why; nothing is written', async (t) => {
  for (const [what, pv] of [
    ['the volume still bound to the deleted staging claim', pvBoundTo('staging-uid')],
    ['the volume already deleted by its reclaim policy', undefined],
  ] as const) {
    const w = world([golden], pv);
    const step = await syncCrossNamespaceClone(w.o, planned, madePending);
    t.equal(step.kind, 'failed', what);
    t.match(
      step.kind === 'failed' && step.why,
      /staging claim images\/vkvm-clone-dv-uid was deleted before its volume pvc-staging-uid moved/,
    );
    t.same(w.calls, [], `${what}: no claimRef moves`);
  }
  const replaced = world(
    [{ ...staging('Bound', 'pv-of-someone'), metadata: { ...staging('Bound').metadata, uid: 'other-uid' } }],
    pvBoundTo('staging-uid'),
  );
  const step = await syncCrossNamespaceClone(replaced.o, planned, madePending);
  t.match(step.kind === 'failed' && step.why, /was replaced by a claim vkvm did not make/);
  t.same(replaced.calls, []);
});

t.test('the staging claim gone once its volume moved: not a failure, the claim is about to bind', async (t) => {
  const w = world([golden], pvBoundTo('claim-uid'));
  t.equal((await syncCrossNamespaceClone(w.o, planned, madePending)).kind, 'claim');
  t.same(w.calls, []);
});

t.test(
  "the cloned volume not found while vkvm's staging claim holds it: the claim waits, naming the volume; nothing is written",
  async (t) => {
    const ownClaim = {
      ...planned.claim,
      metadata: { ...planned.claim.metadata, uid: 'claim-uid' },
      spec: { volumeName: 'pvc-staging-uid' },
    };
    const w = world([staging('Bound', 'pvc-staging-uid')]);
    const step = await syncCrossNamespaceClone(w.o, planned, { ...ownClaim, status: { phase: 'Pending' } });
    t.match(step, { kind: 'claim', missingVolume: 'pvc-staging-uid' });
    t.same(w.calls, []);
  },
);

import t from 'tap';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { DataVolume, DataVolumeSpec } from '../../kubevirt/datavolume-types.js';
import { CLONE_FOR_ANNOTATION, nodeOfVolume, planClaim, type ClaimPlan } from './claim-plan.js';

const dv = (spec: Partial<DataVolumeSpec>): DataVolume => ({
  metadata: { name: 'disk', namespace: 'ns', uid: 'dv-uid', labels: { app: 'x' } },
  spec: { source: { blank: {} }, storage: { resources: { requests: { storage: '1Gi' } } }, ...spec },
});
const sourceClaim = (phase: string): V1PersistentVolumeClaim => ({
  metadata: { name: 'golden', namespace: 'ns' },
  spec: { storageClassName: 'vkvm-local', volumeMode: 'Filesystem', volumeName: 'pv-1', resources: { requests: { storage: '2Gi' } } },
  status: { phase, ...(phase === 'Bound' ? { capacity: { storage: '2Gi' } } : {}) },
});
const pvOn = (node: string): V1PersistentVolume => ({
  metadata: { name: 'pv-1' },
  spec: {
    nodeAffinity: {
      required: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'topology.vkvm.io/node', operator: 'In', values: [node] }] }] },
    },
  },
});
const owner = {
  apiVersion: 'cdi.kubevirt.io/v1beta1',
  kind: 'DataVolume',
  name: 'disk',
  uid: 'dv-uid',
  controller: true,
  blockOwnerDeletion: true,
};

/** What of a plan each case checks: the claim's annotations and spec, or the outcome. */
function shape(plan: ClaimPlan): unknown {
  if (plan.kind !== 'claim') return plan;
  return { annotations: plan.claim.metadata?.annotations, spec: plan.claim.spec };
}

const cases: Array<{ name: string; dv: DataVolume; source?: V1PersistentVolumeClaim; sourcePv?: V1PersistentVolume; want: unknown }> = [
  {
    name: 'blank: CDI defaults (ReadWriteOnce, Filesystem, the default class), source none, exactly the size asked for',
    dv: dv({}),
    want: {
      annotations: { 'cdi.kubevirt.io/storage.import.source': 'none' },
      spec: { accessModes: ['ReadWriteOnce'], volumeMode: 'Filesystem', resources: { requests: { storage: '1Gi' } } },
    },
  },
  {
    name: 'http: the URL and secret as CDI annotates them; storage fields as given',
    dv: dv({
      source: { http: { url: 'https://images.example/disk.qcow2', secretRef: 'creds' } },
      storage: {
        accessModes: ['ReadWriteOncePod'],
        volumeMode: 'Filesystem',
        storageClassName: 'fast',
        resources: { requests: { storage: '3Gi' } },
      },
    }),
    want: {
      annotations: {
        'cdi.kubevirt.io/storage.import.source': 'http',
        'cdi.kubevirt.io/storage.import.endpoint': 'https://images.example/disk.qcow2',
        'cdi.kubevirt.io/storage.import.secretName': 'creds',
      },
      spec: {
        accessModes: ['ReadWriteOncePod'],
        volumeMode: 'Filesystem',
        resources: { requests: { storage: '3Gi' } },
        storageClassName: 'fast',
      },
    },
  },
  {
    name: 'registry: the docker:// endpoint; spec.pvc taken verbatim',
    dv: dv({
      source: { registry: { url: 'docker://quay.io/containerdisks/fedora:40', pullMethod: 'node' } },
      storage: undefined,
      pvc: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '5Gi' } }, selector: { matchLabels: { a: 'b' } } },
    }),
    want: {
      annotations: {
        'cdi.kubevirt.io/storage.import.source': 'registry',
        'cdi.kubevirt.io/storage.import.endpoint': 'docker://quay.io/containerdisks/fedora:40',
      },
      spec: { accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '5Gi' } }, selector: { matchLabels: { a: 'b' } } },
    },
  },
  {
    name: "pvc clone: a dataSource of the source, its class, mode and size, provisioned on the source's node",
    dv: dv({ source: { pvc: { name: 'golden' } }, storage: {} }),
    source: sourceClaim('Bound'),
    sourcePv: pvOn('node-2'),
    want: {
      annotations: { 'volume.kubernetes.io/selected-node': 'node-2' },
      spec: {
        accessModes: ['ReadWriteOnce'],
        volumeMode: 'Filesystem',
        resources: { requests: { storage: '2Gi' } },
        storageClassName: 'vkvm-local',
        dataSource: { kind: 'PersistentVolumeClaim', name: 'golden' },
      },
    },
  },
  {
    name: 'pvc clone naming its own namespace is a clone within it',
    dv: dv({ source: { pvc: { name: 'golden', namespace: 'ns' } } }),
    source: sourceClaim('Bound'),
    want: {
      annotations: {},
      spec: {
        accessModes: ['ReadWriteOnce'],
        volumeMode: 'Filesystem',
        resources: { requests: { storage: '1Gi' } },
        storageClassName: 'vkvm-local',
        dataSource: { kind: 'PersistentVolumeClaim', name: 'golden' },
      },
    },
  },
  {
    name: 'pvc clone from another namespace that did not pass the clone-source admission is refused naming the field',
    dv: dv({ source: { pvc: { name: 'golden', namespace: 'other' } } }),
    source: sourceClaim('Bound'),
    want: {
      kind: 'refused',
      refusal: { field: 'spec.source.pvc.namespace', message: /created while the clone-source admission policy was in force/ },
    },
  },
  {
    name: 'pvc clone waits for a source that is not there',
    dv: dv({ source: { pvc: { name: 'golden' } } }),
    want: { kind: 'waitForSource', reason: 'CloneSourceNotFound', message: 'clone source claim ns/golden not found' },
  },
  {
    name: 'pvc clone waits for a source that is not bound',
    dv: dv({ source: { pvc: { name: 'golden' } } }),
    source: sourceClaim('Pending'),
    want: { kind: 'waitForSource', reason: 'CloneSourceNotBound', message: 'clone source claim ns/golden is not bound yet' },
  },
  {
    name: 'a registry URL without docker:// is refused naming it',
    dv: dv({ source: { registry: { url: 'quay.io/x:1' } } }),
    want: {
      kind: 'refused',
      refusal: { field: 'spec.source.registry.url', message: 'the image as docker://host/repository:tag is required' },
    },
  },
  {
    name: 'an http URL of another scheme is refused naming it',
    dv: dv({ source: { http: { url: 'ftp://x/disk.img' } } }),
    want: { kind: 'refused', refusal: { field: 'spec.source.http.url', message: 'an http:// or https:// URL is required' } },
  },
  {
    name: 'an http source into a Block volume (spec.storage) is a Block claim carrying the source',
    dv: dv({
      source: { http: { url: 'https://images.example/disk.qcow2' } },
      storage: { volumeMode: 'Block', resources: { requests: { storage: '1Gi' } } },
    }),
    want: {
      annotations: {
        'cdi.kubevirt.io/storage.import.source': 'http',
        'cdi.kubevirt.io/storage.import.endpoint': 'https://images.example/disk.qcow2',
      },
      spec: { accessModes: ['ReadWriteOnce'], volumeMode: 'Block', resources: { requests: { storage: '1Gi' } } },
    },
  },
  {
    name: 'a registry source into a Block volume (spec.pvc) is a Block claim carrying the source',
    dv: dv({
      source: { registry: { url: 'docker://registry.example/disk:v1' } },
      storage: undefined,
      pvc: { volumeMode: 'Block', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    }),
    want: {
      annotations: {
        'cdi.kubevirt.io/storage.import.source': 'registry',
        'cdi.kubevirt.io/storage.import.endpoint': 'docker://registry.example/disk:v1',
      },
      spec: { volumeMode: 'Block', accessModes: ['ReadWriteOnce'], resources: { requests: { storage: '1Gi' } } },
    },
  },
  {
    name: 'a blank Block volume is a Block claim (nothing to import)',
    dv: dv({ storage: { volumeMode: 'Block', resources: { requests: { storage: '1Gi' } } } }),
    want: {
      annotations: { 'cdi.kubevirt.io/storage.import.source': 'none' },
      spec: { accessModes: ['ReadWriteOnce'], volumeMode: 'Block', resources: { requests: { storage: '1Gi' } } },
    },
  },
  {
    name: 'two sources (an object that skipped the CRD) are refused at spec.source',
    dv: dv({ source: { blank: {}, http: { url: 'https://x' } } }),
    want: { kind: 'refused', refusal: { field: 'spec.source', message: 'exactly one of blank, http, registry and pvc is required' } },
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const plan = planClaim({ dv: c.dv, ...(c.source ? { source: c.source } : {}), ...(c.sourcePv ? { sourcePv: c.sourcePv } : {}) });
    t.match(shape(plan), c.want);
    if (plan.kind === 'claim') t.same(shape(plan), c.want);
  });
}

t.test(
  "an admitted clone from another namespace: a staging claim there clones the source on its node; the DataVolume's own claim waits for its volume",
  async (t) => {
    const plan = planClaim({
      dv: dv({ source: { pvc: { name: 'golden', namespace: 'other' } }, storage: {} }),
      source: { ...sourceClaim('Bound'), metadata: { name: 'golden', namespace: 'other' } },
      sourcePv: pvOn('node-2'),
      cloneAdmitted: true,
    });
    const spec = {
      accessModes: ['ReadWriteOnce'],
      volumeMode: 'Filesystem',
      resources: { requests: { storage: '2Gi' } },
      storageClassName: 'vkvm-local',
    };
    t.same(plan.kind === 'claim' && { claim: shape(plan), staging: { metadata: plan.staging?.metadata, spec: plan.staging?.spec } }, {
      claim: { annotations: {}, spec },
      staging: {
        metadata: {
          name: 'vkvm-clone-dv-uid',
          namespace: 'other',
          labels: { 'app.kubernetes.io/managed-by': 'vkvm' },
          annotations: { 'volume.kubernetes.io/selected-node': 'node-2', [CLONE_FOR_ANNOTATION]: 'ns/disk' },
        },
        spec: { ...spec, dataSource: { kind: 'PersistentVolumeClaim', name: 'golden' } },
      },
    });
  },
);

t.test('an admitted clone from another namespace waits for its source there, named with its namespace', async (t) => {
  const plan = planClaim({ dv: dv({ source: { pvc: { name: 'golden', namespace: 'other' } } }), cloneAdmitted: true });
  t.same(plan, { kind: 'waitForSource', reason: 'CloneSourceNotFound', message: 'clone source claim other/golden not found' });
});

t.test('the claim has the DataVolume name and namespace, its labels, and the DataVolume as its controller', async (t) => {
  const plan = planClaim({ dv: dv({}) });
  t.equal(plan.kind, 'claim');
  if (plan.kind !== 'claim') return;
  t.match(plan.claim.metadata, {
    name: 'disk',
    namespace: 'ns',
    labels: { app: 'x', 'app.kubernetes.io/managed-by': 'vkvm' },
    ownerReferences: [owner],
  });
});

t.test("a volume's node is its one topology.vkvm.io/node value; none for other affinities", async (t) => {
  t.equal(nodeOfVolume(pvOn('n1')), 'n1');
  t.equal(nodeOfVolume({ spec: {} }), undefined);
  t.equal(nodeOfVolume(undefined), undefined);
});

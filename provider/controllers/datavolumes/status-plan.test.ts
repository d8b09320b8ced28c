import t from 'tap';
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { DataVolume, DataVolumeSource, DataVolumeStatus } from '../../kubevirt/datavolume-types.js';
import type { ClaimPlan } from './claim-plan.js';
import { importCondition } from '../../kubevirt/datavolume-report.js';
import { nextDataVolumeStatus } from './status-plan.js';

const now = new Date('2026-11-28T01:00:00Z');
const dv = (source: DataVolumeSource, status?: DataVolumeStatus): DataVolume => ({
  metadata: { name: 'disk', namespace: 'ns', uid: 'dv-uid' },
  spec: { source, storage: { resources: { requests: { storage: '1Gi' } } } },
  ...(status ? { status } : {}),
});
/** A claim: annotations the controller reads, and what the node reported of its import as the node writes it (a condition). */
const claim = (
  phase: string,
  o: {
    annotations?: Record<string, string>;
    report?: { phase: 'Running' | 'Succeeded' | 'Failed'; percent?: number; message?: string };
  } = {},
): V1PersistentVolumeClaim => ({
  metadata: { name: 'disk', namespace: 'ns', ...(o.annotations ? { annotations: o.annotations } : {}) },
  status: { phase, ...(o.report ? { conditions: [importCondition(o.report.phase, o.report.percent ?? 0, o.report.message, now)] } : {}) },
});
const CLAIM: ClaimPlan = { kind: 'claim', claim: {} };
const HTTP = { http: { url: 'https://x/disk.img' } };
const CLONE = { pvc: { name: 'golden' } };
const CROSS_CLONE = { pvc: { name: 'golden', namespace: 'images' } };
const NODE = { 'volume.kubernetes.io/selected-node': 'n2' };
const stagingClaim = (phase: string, annotations: Record<string, string> = {}): V1PersistentVolumeClaim => ({
  metadata: { name: 'vkvm-clone-dv-uid', namespace: 'images', annotations: { 'vkvm.io/clone-for': 'ns/disk', ...annotations } },
  status: { phase },
});
const running = (percent: number) => ({ phase: 'Running' as const, percent });

const cases: Array<{
  name: string;
  dv: DataVolume;
  plan?: ClaimPlan;
  claim?: V1PersistentVolumeClaim;
  staging?: V1PersistentVolumeClaim;
  cloneFailure?: string;
  wffc?: boolean;
  want: { phase: string; progress: string; bound: string; ready: string; running: string; events: string[] };
}> = [
  {
    name: 'no claim yet: Pending',
    dv: dv({ blank: {} }),
    want: { phase: 'Pending', progress: 'N/A', bound: 'False/NotFound', ready: 'False', running: 'False', events: ['NotFound'] },
  },
  {
    name: 'a claim Pending in a WaitForFirstConsumer class, no node chosen: WaitForFirstConsumer',
    dv: dv({ blank: {} }, { phase: 'Pending' }),
    claim: claim('Pending'),
    wffc: true,
    want: { phase: 'WaitForFirstConsumer', progress: 'N/A', bound: 'False/Pending', ready: 'False', running: 'False', events: ['Pending'] },
  },
  {
    name: 'a claim just created, with no phase yet, is Pending',
    dv: dv({ blank: {} }),
    claim: { metadata: { name: 'disk', namespace: 'ns' } },
    wffc: true,
    want: { phase: 'WaitForFirstConsumer', progress: 'N/A', bound: 'False/Pending', ready: 'False', running: 'False', events: ['Pending'] },
  },
  {
    name: 'a claim Pending with its node chosen (being provisioned): Pending',
    dv: dv({ blank: {} }),
    claim: claim('Pending', { annotations: { 'volume.kubernetes.io/selected-node': 'n1' } }),
    wffc: true,
    want: { phase: 'Pending', progress: 'N/A', bound: 'False/Pending', ready: 'False', running: 'False', events: ['Pending'] },
  },
  {
    name: 'blank, Bound: Succeeded at 100.0%',
    dv: dv({ blank: {} }, { phase: 'WaitForFirstConsumer' }),
    claim: claim('Bound'),
    want: {
      phase: 'Succeeded',
      progress: '100.0%',
      bound: 'True/Bound',
      ready: 'True',
      running: 'False/Completed',
      events: ['Bound', 'ImportSucceeded'],
    },
  },
  {
    name: 'http, Bound, import not started: ImportScheduled',
    dv: dv(HTTP),
    claim: claim('Bound'),
    want: {
      phase: 'ImportScheduled',
      progress: 'N/A',
      bound: 'True/Bound',
      ready: 'False',
      running: 'False',
      events: ['Bound', 'ImportScheduled'],
    },
  },
  {
    name: "http, import Running: ImportInProgress with the node's progress",
    dv: dv(HTTP, { phase: 'ImportScheduled' }),
    claim: claim('Bound', { report: running(45.2) }),
    want: {
      phase: 'ImportInProgress',
      progress: '45.20%',
      bound: 'True/Bound',
      ready: 'False/TransferRunning',
      running: 'True',
      events: ['Bound', 'ImportInProgress'],
    },
  },
  {
    name: 'registry, import Succeeded: Succeeded at 100.0%',
    dv: dv({ registry: { url: 'docker://r/x:1' } }, { phase: 'ImportInProgress' }),
    claim: claim('Bound', { report: { phase: 'Succeeded', percent: 100 } }),
    want: {
      phase: 'Succeeded',
      progress: '100.0%',
      bound: 'True/Bound',
      ready: 'True',
      running: 'False/Completed',
      events: ['Bound', 'ImportSucceeded'],
    },
  },
  {
    name: "http, import Failed: Failed, the node's message in Ready",
    dv: dv(HTTP, { phase: 'ImportInProgress' }),
    claim: claim('Bound', { report: { phase: 'Failed', message: 'HTTP 404 from https://x/disk.img' } }),
    want: {
      phase: 'Failed',
      progress: 'N/A',
      bound: 'True/Bound',
      ready: 'False/ImportFailed: HTTP 404 from https://x/disk.img',
      running: 'False/Error',
      events: ['Bound', 'ImportFailed'],
    },
  },
  // The node names the claim's size field; Ready names the one the DataVolume's user wrote.
  ...(['storage', 'pvc'] as const).map((form) => ({
    name: `an image larger than the claim of a spec.${form} DataVolume: Ready names spec.${form}'s size field`,
    dv: { ...dv(HTTP, { phase: 'ImportInProgress' }), spec: { source: HTTP, [form]: { resources: { requests: { storage: '1Gi' } } } } },
    claim: claim('Bound', { report: { phase: 'Failed', message: 'spec.resources.requests.storage: the image is 32 MiB' } }),
    want: {
      phase: 'Failed',
      progress: 'N/A',
      bound: 'True/Bound',
      ready: `False/ImportFailed: spec.${form}.resources.requests.storage: the image is 32 MiB`,
      running: 'False/Error',
      events: ['Bound', 'ImportFailed'],
    },
  })),
  {
    name: 'clone, source missing: Pending, Bound names why',
    dv: dv(CLONE),
    plan: { kind: 'waitForSource', reason: 'CloneSourceNotFound', message: 'clone source claim ns/golden not found' },
    want: {
      phase: 'Pending',
      progress: 'N/A',
      bound: 'False/CloneSourceNotFound',
      ready: 'False',
      running: 'False',
      events: ['CloneSourceNotFound'],
    },
  },
  {
    name: "clone, claim Pending on the source's node: CloneInProgress",
    dv: dv(CLONE, { phase: 'Pending' }),
    claim: claim('Pending', { annotations: { 'volume.kubernetes.io/selected-node': 'n2' } }),
    wffc: true,
    want: {
      phase: 'CloneInProgress',
      progress: 'N/A',
      bound: 'False/Pending',
      ready: 'False',
      running: 'False',
      events: ['Pending', 'CloneInProgress'],
    },
  },
  {
    name: 'clone, claim Pending with no node: CloneScheduled',
    dv: dv(CLONE),
    claim: claim('Pending'),
    want: {
      phase: 'CloneScheduled',
      progress: 'N/A',
      bound: 'False/Pending',
      ready: 'False',
      running: 'False',
      events: ['Pending', 'CloneScheduled'],
    },
  },
  {
    name: 'clone, Bound: Succeeded',
    dv: dv(CLONE, { phase: 'CloneInProgress' }),
    claim: claim('Bound'),
    want: {
      phase: 'Succeeded',
      progress: '100.0%',
      bound: 'True/Bound',
      ready: 'True',
      running: 'False/Completed',
      events: ['Bound', 'CloneSucceeded'],
    },
  },
  {
    name: 'clone from another namespace, its staging claim waiting for a node: CloneScheduled',
    dv: dv(CROSS_CLONE, { phase: 'Pending' }),
    staging: stagingClaim('Pending'),
    want: {
      phase: 'CloneScheduled',
      progress: 'N/A',
      bound: 'False/NotFound',
      ready: 'False',
      running: 'False',
      events: ['NotFound', 'CloneScheduled'],
    },
  },
  {
    name: "clone from another namespace, its staging claim being filled on the source's node: CloneInProgress",
    dv: dv(CROSS_CLONE, { phase: 'CloneScheduled' }),
    staging: stagingClaim('Pending', NODE),
    want: {
      phase: 'CloneInProgress',
      progress: 'N/A',
      bound: 'False/NotFound',
      ready: 'False',
      running: 'False',
      events: ['NotFound', 'CloneInProgress'],
    },
  },
  {
    name: 'clone from another namespace, its staging claim bound (the claim not made yet): CloneInProgress',
    dv: dv(CROSS_CLONE),
    staging: stagingClaim('Bound'),
    want: {
      phase: 'CloneInProgress',
      progress: 'N/A',
      bound: 'False/NotFound',
      ready: 'False',
      running: 'False',
      events: ['NotFound', 'CloneInProgress'],
    },
  },
  {
    name: 'clone from another namespace, its claim Pending naming the cloned volume (moving to it): still CloneInProgress',
    dv: dv(CROSS_CLONE, { phase: 'CloneInProgress' }),
    claim: { ...claim('Pending'), spec: { volumeName: 'pvc-staging-uid' } },
    want: { phase: 'CloneInProgress', progress: 'N/A', bound: 'False/Pending', ready: 'False', running: 'False', events: ['Pending'] },
  },
  {
    name: 'clone from another namespace that cannot go on (its staging claim deleted): Failed, why in Bound, Ready and one Warning',
    dv: dv(CROSS_CLONE, { phase: 'CloneInProgress' }),
    claim: { ...claim('Pending'), spec: { volumeName: 'pvc-staging-uid' } },
    cloneFailure: 'the staging claim images/vkvm-clone-dv-uid was deleted',
    want: {
      phase: 'Failed',
      progress: 'N/A',
      bound: 'False/ErrClaimNotValid',
      ready: 'False/ErrClaimNotValid: the staging claim images/vkvm-clone-dv-uid was deleted',
      running: 'False',
      events: ['ErrClaimNotValid'],
    },
  },
  {
    name: 'refused: Failed, the field in Ready and in a Warning',
    dv: dv({ pvc: { name: 'golden', namespace: 'other' } }),
    plan: { kind: 'refused', refusal: { field: 'spec.source.pvc.namespace', message: 'clone from another namespace is not supported' } },
    want: {
      phase: 'Failed',
      progress: 'N/A',
      bound: 'False/ErrClaimNotValid',
      ready: 'False/ErrClaimNotValid: spec.source.pvc.namespace: clone from another namespace is not supported',
      running: 'False',
      events: ['ErrClaimNotValid'],
    },
  },
  {
    name: 'claim Lost: Failed',
    dv: dv({ blank: {} }, { phase: 'Succeeded' }),
    claim: claim('Lost'),
    want: {
      phase: 'Failed',
      progress: 'N/A',
      bound: 'False/ClaimLost',
      ready: 'False',
      running: 'False',
      events: ['ClaimLost', 'ErrClaimLost'],
    },
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const { status, events } = nextDataVolumeStatus({
      dv: c.dv,
      plan: c.plan ?? CLAIM,
      ...(c.claim ? { claim: c.claim } : {}),
      ...(c.staging ? { staging: c.staging } : {}),
      ...(c.cloneFailure ? { cloneFailure: c.cloneFailure } : {}),
      waitForFirstConsumer: c.wffc ?? false,
      now,
    });
    const cond = (type: string) => {
      const x = status.conditions?.find((k) => k.type === type);
      const reason = x?.reason ? `/${x.reason}` : '';
      return `${x?.status}${reason}${type === 'Ready' && x?.message ? `: ${x.message}` : ''}`;
    };
    t.same(
      {
        phase: status.phase,
        progress: status.progress,
        bound: cond('Bound'),
        ready: cond('Ready'),
        running: cond('Running'),
        events: events.map((e) => e.reason),
      },
      c.want,
    );
    if (c.claim) t.equal(status.claimName, 'disk', 'claimName names the claim');
  });
}

t.test('a sync that changes nothing records no event and keeps the transition times', async (t) => {
  const first = nextDataVolumeStatus({
    dv: dv(HTTP),
    plan: CLAIM,
    claim: claim('Bound', { report: running(10) }),
    waitForFirstConsumer: false,
    now,
  });
  const later = new Date(now.getTime() + 60_000);
  const again = nextDataVolumeStatus({
    dv: dv(HTTP, first.status),
    plan: CLAIM,
    claim: claim('Bound', { report: running(10) }),
    waitForFirstConsumer: false,
    now: later,
  });
  t.same(again.events, []);
  t.same(again.status, first.status);
});

t.test('a claim naming a StorageClass that does not exist: Pending, and the Bound condition and a Warning name the field', async (t) => {
  const pvcDv: DataVolume = { ...dv({ blank: {} }), spec: { source: { blank: {} }, pvc: { storageClassName: 'local' } } };
  for (const [what, d, field] of [
    ['spec.storage', dv({ blank: {} }), 'spec.storage.storageClassName'],
    ['spec.pvc', pvcDv, 'spec.pvc.storageClassName'],
  ] as const) {
    const { status, events } = nextDataVolumeStatus({
      dv: d,
      plan: CLAIM,
      claim: claim('Pending'),
      waitForFirstConsumer: false,
      missingStorageClass: 'local',
      now,
    });
    const bound = status.conditions?.find((c) => c.type === 'Bound');
    t.same(
      { phase: status.phase, bound: `${bound?.status}/${bound?.reason}`, events: events.map((e) => `${e.type}/${e.reason}`) },
      { phase: 'Pending', bound: 'False/StorageClassNotFound', events: ['Warning/StorageClassNotFound'] },
      what,
    );
    t.match(bound?.message, new RegExp(`^${field.replace(/\./g, '\\.')}: StorageClass "local" not found`), `${what}: names ${field}`);
  }
});

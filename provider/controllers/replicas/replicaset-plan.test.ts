import t from 'tap';
import type { VirtualMachineInstanceReplicaSet } from '../../kubevirt/replica-types.js';
import type { VirtualMachineInstance, VmiPhase } from '../../kubevirt/types.js';
import { BURST_REPLICAS, planReplicaSet, scaleInOrder, vmiForReplicaSet, vmisOf } from './replicaset-plan.js';

const labels = { 'kubevirt.io/vmReplicaSet': 'rs' };
const rs = (spec: Partial<VirtualMachineInstanceReplicaSet['spec']> = {}): VirtualMachineInstanceReplicaSet => ({
  metadata: { name: 'rs', namespace: 'ns', uid: 'rs-uid' },
  spec: {
    replicas: 2,
    selector: { matchLabels: labels },
    template: { metadata: { labels, annotations: { a: 'b' } }, spec: { domain: { resources: { requests: { memory: '128Mi' } } } } },
    ...spec,
  },
});
const vmi = (
  name: string,
  phase: VmiPhase,
  o: { ready?: boolean; created?: string; deleting?: boolean; owner?: string; labels?: Record<string, string> } = {},
): VirtualMachineInstance => ({
  metadata: {
    name,
    namespace: 'ns',
    uid: `${name}-uid`,
    labels: o.labels ?? labels,
    creationTimestamp: o.created ?? '2026-11-27T10:00:00Z',
    ...(o.deleting ? { deletionTimestamp: '2026-11-27T10:05:00Z' } : {}),
    ownerReferences: [
      { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstanceReplicaSet', name: 'rs', uid: o.owner ?? 'rs-uid', controller: true },
    ],
  },
  spec: { domain: {} },
  status: { phase, conditions: o.ready ? [{ type: 'Ready', status: 'True' }] : [] },
});
const names = (vmis: readonly VirtualMachineInstance[]) => vmis.map((v) => v.metadata.name);

t.test("the set's VMIs are those it controls that its selector still matches", async (t) => {
  const all = [vmi('a', 'Running'), vmi('other-owner', 'Running', { owner: 'x' }), vmi('relabelled', 'Running', { labels: { app: 'x' } })];
  t.same(names(vmisOf(rs(), all)), ['a']);
});

t.test('a sync creates what is missing, deletes the surplus, and cleans up finished VMIs once replaced', async (t) => {
  const plan = (spec: Partial<VirtualMachineInstanceReplicaSet['spec']>, vmis: VirtualMachineInstance[]) => {
    const p = planReplicaSet(rs(spec), vmis);
    return { create: p.create, delete: names(p.delete), cleanUp: names(p.cleanUp), active: p.active.length };
  };
  const running = [vmi('a', 'Running', { ready: true }), vmi('b', 'Running', { ready: true, created: '2026-11-27T10:01:00Z' })];
  t.same(
    {
      fresh: plan({}, []),
      defaultOne: plan({ replicas: undefined }, []),
      steady: plan({}, running),
      finishedReplaced: plan({}, [...running.slice(0, 1), vmi('done', 'Failed')]),
      deletingNotCounted: plan({}, [...running.slice(0, 1), vmi('going', 'Running', { deleting: true })]),
      scaleIn: plan({ replicas: 1 }, [...running, vmi('pending', 'Scheduling')]),
      paused: plan({ paused: true, replicas: 5 }, running),
      burst: plan({ replicas: 1000 }, []),
    },
    {
      fresh: { create: 2, delete: [], cleanUp: [], active: 0 },
      defaultOne: { create: 1, delete: [], cleanUp: [], active: 0 },
      steady: { create: 0, delete: [], cleanUp: [], active: 2 },
      finishedReplaced: { create: 1, delete: [], cleanUp: ['done'], active: 1 },
      deletingNotCounted: { create: 1, delete: [], cleanUp: [], active: 1 },
      scaleIn: { create: 0, delete: ['pending', 'b'], cleanUp: [], active: 3 },
      paused: { create: 0, delete: [], cleanUp: [], active: 2 },
      burst: { create: BURST_REPLICAS, delete: [], cleanUp: [], active: 0 },
    },
  );
});

t.test('scale-in takes VMIs not yet running first, then not Ready, newest first within each', async (t) => {
  const order = scaleInOrder([
    vmi('old-ready', 'Running', { ready: true, created: '2026-11-27T09:00:00Z' }),
    vmi('new-ready', 'Running', { ready: true, created: '2026-11-27T11:00:00Z' }),
    vmi('not-ready', 'Running', { created: '2026-11-27T08:00:00Z' }),
    vmi('scheduling', 'Scheduling', { created: '2026-11-27T07:00:00Z' }),
  ]);
  t.same(names(order), ['scheduling', 'not-ready', 'new-ready', 'old-ready']);
});

t.test("the template's VMI: generated from the template's or set's name, its labels, controlled by the set", async (t) => {
  const made = vmiForReplicaSet(rs());
  t.same(made.metadata, {
    generateName: 'rs',
    namespace: 'ns',
    labels,
    annotations: { a: 'b' },
    ownerReferences: [
      {
        apiVersion: 'kubevirt.io/v1',
        kind: 'VirtualMachineInstanceReplicaSet',
        name: 'rs',
        uid: 'rs-uid',
        controller: true,
        blockOwnerDeletion: true,
      },
    ],
  });
  t.same(made.spec, rs().spec.template.spec);
  const named = rs({ template: { metadata: { labels, generateName: 'web-' }, spec: { domain: {} } } });
  t.equal(vmiForReplicaSet(named).metadata.generateName, 'web-');
});

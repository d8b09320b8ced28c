import t from 'tap';
import type { VirtualMachinePool } from '../../kubevirt/replica-types.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../kubevirt/types.js';
import { planPool, scaleInOrder, vmsOf, type PoolPlanInput } from './pool-plan.js';
import { POOL_TEMPLATE_LABEL, poolTemplateHash, vmForPool } from './pool-vm.js';

const labels = { 'kubevirt.io/vmpool': 'web' };
const pool = (spec: Partial<VirtualMachinePool['spec']> = {}): VirtualMachinePool => ({
  metadata: { name: 'web', namespace: 'ns', uid: 'pool-uid' },
  spec: {
    replicas: 2,
    selector: { matchLabels: labels },
    virtualMachineTemplate: {
      metadata: { labels },
      spec: {
        runStrategy: 'Always',
        template: { metadata: { labels }, spec: { domain: { resources: { requests: { memory: '128Mi' } } } } },
      },
    },
    ...spec,
  },
});
const vmOf = (p: VirtualMachinePool, idx: number, o: { deleting?: boolean; created?: string } = {}): VirtualMachine => {
  const vm = vmForPool(p, idx);
  return {
    ...vm,
    metadata: {
      ...vm.metadata,
      uid: `uid-${idx}`,
      creationTimestamp: o.created ?? `2026-11-27T10:0${idx}:00Z`,
      ...(o.deleting ? { deletionTimestamp: '2026-11-27T11:00:00Z' } : {}),
    },
  };
};
const input = (p: VirtualMachinePool, owned: VirtualMachine[], extra: Partial<PoolPlanInput> = {}): PoolPlanInput => ({
  pool: p,
  owned,
  takenNames: new Set(owned.map((vm) => vm.metadata.name!)),
  vmiOf: () => undefined,
  restartRequired: () => false,
  random: () => 0,
  ...extra,
});
const names = (vms: readonly VirtualMachine[]) => vms.map((vm) => vm.metadata.name);

t.test("the pool's VMs are those it controls that its selector matches", async (t) => {
  const p = pool();
  const stranger = { ...vmOf(p, 5), metadata: { ...vmOf(p, 5).metadata, ownerReferences: [] } };
  t.same(names(vmsOf(p, [vmOf(p, 0), stranger])), ['web-0']);
});

t.test('scale out to the lowest free names; scale in counting VMs already going; idle when paused', async (t) => {
  const p = pool({ replicas: 3 });
  t.same(planPool(input(p, [vmOf(p, 1)])), { kind: 'scaleOut', names: ['web-0', 'web-2'] });
  const one = pool({ replicas: 1 });
  const three = [vmOf(one, 0), vmOf(one, 1), vmOf(one, 2)];
  const scaleIn = planPool(input(one, three));
  t.same(scaleIn.kind === 'scaleIn' && scaleIn.vms.length, 2, 'two of three go');
  t.same(planPool(input(one, [vmOf(one, 0), vmOf(one, 1, { deleting: true }), vmOf(one, 2)])).kind, 'scaleIn');
  const twoGoing = planPool(input(one, [vmOf(one, 0), vmOf(one, 1, { deleting: true }), vmOf(one, 2, { deleting: true })]));
  t.same(twoGoing, { kind: 'idle' }, 'VMs being deleted count toward the scale-in');
  t.same(planPool(input(pool({ paused: true, replicas: 5 }), [])), { kind: 'idle' });
});

t.test("scale-in order: KubeVirt's sort policies, Random by default", async (t) => {
  const p = pool();
  const vms = [
    vmOf(p, 2, { created: '2026-11-27T09:00:00Z' }),
    vmOf(p, 0, { created: '2026-11-27T11:00:00Z' }),
    vmOf(p, 1, { created: '2026-11-27T10:00:00Z' }),
  ];
  t.same(
    {
      ascending: names(scaleInOrder(vms, 'AscendingOrder', Math.random)),
      descending: names(scaleInOrder(vms, 'DescendingOrder', Math.random)),
      newest: names(scaleInOrder(vms, 'Newest', Math.random)),
      oldest: names(scaleInOrder(vms, 'Oldest', Math.random)),
      randomAllZero: names(scaleInOrder(vms, 'Random', () => 0)),
    },
    {
      ascending: ['web-0', 'web-1', 'web-2'],
      descending: ['web-2', 'web-1', 'web-0'],
      newest: ['web-0', 'web-1', 'web-2'],
      oldest: ['web-2', 'web-1', 'web-0'],
      randomAllZero: ['web-0', 'web-1', 'web-2'],
    },
  );
  const policy = pool({ replicas: 1, scaleInStrategy: { proactive: { selectionPolicy: { sortPolicy: 'DescendingOrder' } } } });
  const plan = planPool(input(policy, [vmOf(policy, 0), vmOf(policy, 1), vmOf(policy, 2)]));
  t.same(plan.kind === 'scaleIn' && names(plan.vms), ['web-2', 'web-1'], "the pool's policy is used");
});

t.test('with the count right, VMs of an older template are updated and their stale VMIs restarted', async (t) => {
  const before = pool();
  const after = pool({
    virtualMachineTemplate: {
      ...before.spec.virtualMachineTemplate,
      spec: {
        runStrategy: 'Always',
        template: { metadata: { labels }, spec: { domain: { resources: { requests: { memory: '256Mi' } } } } },
      },
    },
  });
  const vmi = (name: string, hash: string): VirtualMachineInstance => ({
    metadata: { name, namespace: 'ns', uid: `vmi-${name}`, labels: { [POOL_TEMPLATE_LABEL]: hash } },
    spec: { domain: {} },
  });
  const outdated = vmOf(before, 0);
  const current = vmOf(after, 1);
  const plan = planPool(
    input(after, [outdated, current], {
      vmiOf: (name) => vmi(name, poolTemplateHash(before)),
      restartRequired: () => true,
    }),
  );
  t.same(plan.kind === 'update' && { vms: names(plan.vms), restart: plan.restart.map((v) => v.metadata.name) }, {
    vms: ['web-0'],
    restart: ['web-1'],
  });
  const single = { ...after, spec: { ...after.spec, replicas: 1 } };
  const upToDate = planPool(input(single, [current], { vmiOf: (name) => vmi(name, poolTemplateHash(after)), restartRequired: () => true }));
  t.same(upToDate, { kind: 'idle' }, 'a VMI made from the current template stays');
  const sameSpec = planPool(
    input(single, [current], { vmiOf: (name) => vmi(name, poolTemplateHash(before)), restartRequired: () => false }),
  );
  t.same(sameSpec, { kind: 'idle' }, 'nor is a VMI whose spec the change left as it is restarted');
});

import t from 'tap';
import type { KubeClients } from '../../kube/client.js';
import type { DataVolume } from '../../kubevirt/datavolume-types.js';
import { CloneAdmission, createdUnderPolicy, POLICY_PROPAGATION_MS } from './clone-admission.js';

const policySince = Date.parse('2026-11-28T09:00:00Z');

t.test('an object created once the policy had time to take effect was admitted under it', async (t) => {
  t.equal(createdUnderPolicy(policySince + POLICY_PROPAGATION_MS, policySince), true);
  t.equal(createdUnderPolicy(policySince + 3_600_000, policySince), true);
});

t.test('an object created before the policy, or while the apiserver may not enforce it yet, was not', async (t) => {
  t.equal(createdUnderPolicy(policySince - 1000, policySince), false, 'created before the policy');
  t.equal(createdUnderPolicy(policySince + POLICY_PROPAGATION_MS - 1, policySince), false, 'created as the policy propagated');
});

t.test('without the policy (or its binding), or without a creation time, nothing was admitted', async (t) => {
  t.equal(createdUnderPolicy(policySince, undefined), false);
  t.equal(createdUnderPolicy(undefined, policySince), false);
});

/** The API as CloneAdmission reads it: the two policies' objects and the owners, by name. */
function admission(created: Record<string, string | undefined>, owners: Record<string, { uid: string; at: string; pool?: string }>) {
  const notFound = Object.assign(new Error('not found'), { code: 404 });
  const clients = {
    objects: {
      read: async ({ kind, metadata }: { kind: string; metadata: { name: string } }) => {
        const at = created[`${kind}/${metadata.name}`];
        if (!at) throw notFound;
        return { metadata: { creationTimestamp: at } };
      },
    },
    custom: {
      getNamespacedCustomObject: async ({ name }: { name: string }) => {
        const o = owners[name];
        if (!o) throw notFound;
        const pool = o.pool ? [{ kind: 'VirtualMachinePool', name: o.pool, uid: `${o.pool}-uid`, controller: true }] : undefined;
        return { metadata: { name, uid: o.uid, creationTimestamp: o.at, ...(pool ? { ownerReferences: pool } : {}) } };
      },
    },
  } as unknown as KubeClients;
  return new CloneAdmission(clients);
}

const policies = (at: string) => ({
  'ValidatingAdmissionPolicy/vkvm-datavolume-clone-source': at,
  'ValidatingAdmissionPolicyBinding/vkvm-datavolume-clone-source': at,
  'ValidatingAdmissionPolicy/vkvm-vm-clone-source': at,
  'ValidatingAdmissionPolicyBinding/vkvm-vm-clone-source': at,
});
const dvOf = (at: string, vm?: string): DataVolume => ({
  metadata: {
    name: 'disk',
    namespace: 'ns',
    creationTimestamp: at,
    ...(vm
      ? { ownerReferences: [{ apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: vm, uid: `${vm}-uid`, controller: true }] }
      : {}),
  },
  spec: { source: { pvc: { name: 'golden', namespace: 'images' } } },
});

t.test("a DataVolume is admitted by the policy's creation time, and its VM's and pool's", async (t) => {
  const on = admission(policies('2026-11-28T09:00:00Z'), {
    late: { uid: 'late-uid', at: '2026-11-28T09:10:00Z' },
    early: { uid: 'early-uid', at: '2026-11-28T08:00:00Z' },
    pooled: { uid: 'pooled-uid', at: '2026-11-28T09:10:00Z', pool: 'old-pool' },
    'old-pool': { uid: 'old-pool-uid', at: '2026-11-28T08:00:00Z' },
  });
  t.same(
    {
      dvAfter: await on.admitted(dvOf('2026-11-28T09:10:00Z')),
      dvBefore: await on.admitted(dvOf('2026-11-28T08:59:00Z')),
      vmAfter: await on.admitted(dvOf('2026-11-28T09:10:00Z', 'late')),
      vmBefore: await on.admitted(dvOf('2026-11-28T09:10:00Z', 'early')),
      vmGone: await on.admitted(dvOf('2026-11-28T09:10:00Z', 'gone')),
      poolBefore: await on.admitted(dvOf('2026-11-28T09:10:00Z', 'pooled')),
    },
    { dvAfter: true, dvBefore: false, vmAfter: true, vmBefore: false, vmGone: false, poolBefore: false },
  );
  const unbound = admission({ 'ValidatingAdmissionPolicy/vkvm-datavolume-clone-source': '2026-11-28T09:00:00Z' }, {});
  t.equal(await unbound.admitted(dvOf('2026-11-28T09:10:00Z')), false, 'a policy without its binding admits nothing');
});

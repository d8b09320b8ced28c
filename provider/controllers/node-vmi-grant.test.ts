import t from 'tap';
import { nodeVmiGrant } from './node-vmi-grant.js';

t.test("a VMI's grant lets its node alone get, list and watch that one VMI, and goes with the VMI", async (t) => {
  const vmi = { metadata: { name: 'tenant-a', namespace: 'team', uid: 'u-1' }, spec: { domain: {} } };
  const { role, binding } = nodeVmiGrant(vmi, 'n1');
  const owner = { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstance', name: 'tenant-a', uid: 'u-1' };
  t.match(role, {
    kind: 'Role',
    metadata: { name: 'vkvm-node-vmi-u-1', namespace: 'team', ownerReferences: [owner] },
    rules: [
      { apiGroups: ['kubevirt.io'], resources: ['virtualmachineinstances'], resourceNames: ['tenant-a'], verbs: ['get', 'list', 'watch'] },
    ],
  });
  t.equal(role.rules?.length, 1, 'nothing else: no status, no other VMI');
  t.match(binding, {
    kind: 'RoleBinding',
    metadata: { name: 'vkvm-node-vmi-u-1', namespace: 'team', ownerReferences: [owner] },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'vkvm-node-vmi-u-1' },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'system:node:n1' }],
  });
  t.notOk(
    binding.metadata?.ownerReferences?.[0]?.blockOwnerDeletion,
    'no blockOwnerDeletion: the controllers need no finalizers right on VMIs for it',
  );
});

import t from 'tap';
import type { VirtualMachinePool } from '../../kubevirt/replica-types.js';
import { indexedVmSpec, indexOfName, newVmNames, POOL_TEMPLATE_LABEL, poolTemplateHash, vmForPool } from './pool-vm.js';

const labels = { 'kubevirt.io/vmpool': 'web' };
const pool = (nameGeneration?: VirtualMachinePool['spec']['nameGeneration']): VirtualMachinePool => ({
  metadata: { name: 'web', namespace: 'ns', uid: 'pool-uid' },
  spec: {
    replicas: 2,
    selector: { matchLabels: labels },
    ...(nameGeneration ? { nameGeneration } : {}),
    virtualMachineTemplate: {
      metadata: { labels, annotations: { note: 'x' } },
      spec: {
        runStrategy: 'Always',
        template: {
          metadata: { labels },
          spec: {
            domain: { resources: { requests: { memory: '128Mi' } } },
            volumes: [
              { name: 'ci', cloudInitNoCloud: { secretRef: { name: 'userdata' }, networkDataSecretRef: { name: 'net' } } },
              { name: 'disk', containerDisk: { image: 'img' } },
            ],
          },
        },
      },
    },
  },
});

t.test('new VM names take the lowest indices no VM of the namespace has', async (t) => {
  t.same(newVmNames('web', 3, new Set(['web-0', 'web-2', 'other-1'])), ['web-1', 'web-3', 'web-4']);
  t.same([indexOfName('web-12'), indexOfName('my-pool-3'), indexOfName('web')], [12, 3, undefined]);
});

t.test("appendIndexToSecretRefs gives each VM its own cloud-init secrets, <name>-<index>, as KubeVirt's pool", async (t) => {
  const refs = (p: VirtualMachinePool, i: number) => indexedVmSpec(p, i).template.spec.volumes?.[0]?.cloudInitNoCloud;
  t.same(refs(pool({ appendIndexToSecretRefs: true }), 3), { secretRef: { name: 'userdata-3' }, networkDataSecretRef: { name: 'net-3' } });
  t.same(refs(pool(), 3), { secretRef: { name: 'userdata' }, networkDataSecretRef: { name: 'net' } }, 'unchanged unless asked');
  t.equal(
    pool({ appendIndexToSecretRefs: true }).spec.virtualMachineTemplate.spec.template.spec.volumes?.[0]?.cloudInitNoCloud?.secretRef?.name,
    'userdata',
    'the pool itself is not changed',
  );
});

t.test('a pool VM: its name, the template labels with the template hash, controlled by the pool', async (t) => {
  const p = pool();
  const vm = vmForPool(p, 1);
  const hash = poolTemplateHash(p);
  t.same(vm.metadata, {
    name: 'web-1',
    namespace: 'ns',
    labels: { ...labels, [POOL_TEMPLATE_LABEL]: hash },
    annotations: { note: 'x' },
    ownerReferences: [
      {
        apiVersion: 'pool.kubevirt.io/v1alpha1',
        kind: 'VirtualMachinePool',
        name: 'web',
        uid: 'pool-uid',
        controller: true,
        blockOwnerDeletion: true,
      },
    ],
  });
  t.same(vm.spec.template.metadata?.labels, { ...labels, [POOL_TEMPLATE_LABEL]: hash }, 'its VMIs carry the hash too');
  t.not(poolTemplateHash(pool({ appendIndexToSecretRefs: true })), hash, 'name generation is part of what made the VM');
  const replicas: VirtualMachinePool = { ...p, spec: { ...p.spec, replicas: 7 } };
  t.equal(poolTemplateHash(replicas), hash, 'scaling is not a template change');
});

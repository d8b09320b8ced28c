import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import type { V1Node } from '@kubernetes/client-node';
import { launcherAccelerator, launcherMemoryRequestMiB, launcherPodFor, launcherPodOf, vmiCompute, vmiIdOf } from './launcher-pod.js';
import { FIXED_OVERHEAD_MIB, GRAPHICS_OVERHEAD_MIB, PER_VCPU_OVERHEAD_MIB, TCG_OVERHEAD_MIB } from '../../launcher/agent-api.js';
import type { VirtualMachineInstance } from '../kubevirt/types.js';

const vmi = (spec: Partial<VirtualMachineInstance['spec']> = {}): VirtualMachineInstance => ({
  metadata: { name: 'testvm', namespace: 'ns1', uid: 'vmi-uid' },
  spec: { domain: { resources: { requests: { memory: '128Mi' } } }, ...spec },
});

t.test('the launcher pod carries the labels, owner, scheduling constraints and requests KubeVirt gives it', async (t) => {
  const pod = launcherPodFor(
    vmi({
      domain: { resources: { requests: { memory: '1Gi', cpu: '500m' } } },
      nodeSelector: { zone: 'a' },
      tolerations: [{ key: 'dedicated', operator: 'Equal', value: 'vms', effect: 'NoSchedule' }],
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'k', operator: 'Exists' }] }] },
        },
      },
      terminationGracePeriodSeconds: 5,
      volumes: [
        { name: 'ci', cloudInitNoCloud: { userData: 'x' } },
        { name: 'root', containerDisk: { image: 'quay.io/containerdisks/fedora:40' } },
      ],
    }),
    'kvm',
  );
  t.same(
    pod,
    {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        generateName: 'virt-launcher-testvm-',
        namespace: 'ns1',
        labels: {
          'kubevirt.io': 'virt-launcher',
          'kubevirt.io/created-by': 'vmi-uid',
          'vm.kubevirt.io/name': 'testvm',
          'vmi.kubevirt.io/id': 'testvm',
        },
        annotations: { 'kubevirt.io/domain': 'testvm' },
        ownerReferences: [
          {
            apiVersion: 'kubevirt.io/v1',
            kind: 'VirtualMachineInstance',
            name: 'testvm',
            uid: 'vmi-uid',
            controller: true,
            blockOwnerDeletion: true,
          },
        ],
      },
      spec: {
        nodeSelector: { zone: 'a', 'kubevirt.io/schedulable': 'true' },
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: 'k', operator: 'Exists' }] }],
            },
          },
        },
        tolerations: [
          { key: 'dedicated', operator: 'Equal', value: 'vms', effect: 'NoSchedule' },
          { key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' },
        ],
        terminationGracePeriodSeconds: 5,
        restartPolicy: 'Never',
        containers: [
          {
            name: 'compute',
            image: 'quay.io/containerdisks/fedora:40',
            resources: {
              requests: { memory: `${1024 + 16 + FIXED_OVERHEAD_MIB + PER_VCPU_OVERHEAD_MIB + GRAPHICS_OVERHEAD_MIB}Mi`, cpu: '500m' },
            },
          },
        ],
      },
    },
    'every field the scheduler and vkvm read',
  );
});

t.test("the VMI's labels are the pod's, so Services selecting them reach the VM; KubeVirt's own labels win", async (t) => {
  const labelled = vmi();
  labelled.metadata.labels = {
    special: 'vmi-ephemeral',
    'kubevirt.io/vm': 'testvm',
    'kubevirt.io': 'not-a-launcher',
    'kubevirt.io/created-by': 'another-vmi',
    'vm.kubevirt.io/name': 'other',
    'vmi.kubevirt.io/id': 'other',
  };
  t.same(launcherPodFor(labelled, 'kvm').metadata?.labels, {
    special: 'vmi-ephemeral',
    'kubevirt.io/vm': 'testvm',
    'kubevirt.io': 'virt-launcher',
    'kubevirt.io/created-by': 'vmi-uid',
    'vm.kubevirt.io/name': 'testvm',
    'vmi.kubevirt.io/id': 'testvm',
  });
});

t.test("a VMI name too long for a label value becomes KubeVirt's truncated, hashed vmi.kubevirt.io/id", async (t) => {
  t.same([vmiIdOf('testvm'), vmiIdOf('a'.repeat(63)), vmiIdOf('a'.repeat(70))], ['testvm', 'a'.repeat(63), `${'a'.repeat(54)}-ed6c69d9`]);
});

t.test('defaults: no containerDisk, no cpu request, no grace period', async (t) => {
  const pod = launcherPodFor(vmi(), 'kvm');
  t.match(pod.spec, {
    nodeSelector: { 'kubevirt.io/schedulable': 'true' },
    tolerations: [{ key: 'virtual-kubelet.io/provider', operator: 'Exists', effect: 'NoSchedule' }],
    terminationGracePeriodSeconds: 30,
    containers: [
      {
        image: 'vkvm/vmi',
        resources: {
          requests: { cpu: '100m', memory: `${128 + 2 + FIXED_OVERHEAD_MIB + PER_VCPU_OVERHEAD_MIB + GRAPHICS_OVERHEAD_MIB}Mi` },
        },
      },
    ],
  });
  t.notOk(pod.spec?.affinity, 'no affinity unless the VMI has one');
  t.notOk(pod.spec?.volumes, 'no volumes unless the VMI reads Secrets or claims');
  t.notOk(pod.spec?.dnsPolicy, "the pod's default DNS policy (ClusterFirst) unless the VMI has one");
});

t.test("the VMI's dnsPolicy and dnsConfig are the launcher pod's, which the node hands to the guest", async (t) => {
  const dnsConfig = { nameservers: ['192.0.2.10'], searches: ['team.example'], options: [{ name: 'ndots', value: '2' }] };
  const pod = launcherPodFor(vmi({ dnsPolicy: 'None', dnsConfig }), 'kvm');
  t.same({ dnsPolicy: pod.spec?.dnsPolicy, dnsConfig: pod.spec?.dnsConfig }, { dnsPolicy: 'None', dnsConfig });
});

t.test('the Secrets and claims the VMI reads are pod volumes (Node authorizer, volume scheduling)', async (t) => {
  const pod = launcherPodFor(
    vmi({
      volumes: [
        { name: 'root', containerDisk: { image: 'x' } },
        { name: 'ci', cloudInitNoCloud: { secretRef: { name: 'user' }, networkDataSecretRef: { name: 'net' } } },
        { name: 'inline', cloudInitNoCloud: { userData: '#cloud-config' } },
        { name: 'data', persistentVolumeClaim: { claimName: 'pvc-1', readOnly: true } },
        { name: 'dv', dataVolume: { name: 'dv-1' } },
      ],
    }),
    'kvm',
  );
  t.same(pod.spec?.volumes, [
    { name: 'ci-userdata', secret: { secretName: 'user' } },
    { name: 'ci-networkdata', secret: { secretName: 'net' } },
    { name: 'data', persistentVolumeClaim: { claimName: 'pvc-1', readOnly: true } },
    { name: 'dv', persistentVolumeClaim: { claimName: 'dv-1' } },
  ]);
});

t.test("the import secrets of the VMI's claims are secret volumes, once each, so the node may read them (Node authorizer)", async (t) => {
  const pod = launcherPodFor(vmi({ volumes: [{ name: 'dv', dataVolume: { name: 'dv-1' } }] }), 'kvm', ['pull', 'other', 'pull']);
  t.same(
    pod.spec?.volumes,
    [
      { name: 'dv', persistentVolumeClaim: { claimName: 'dv-1' } },
      { name: 'import-secret-0', secret: { secretName: 'pull' } },
      { name: 'import-secret-1', secret: { secretName: 'other' } },
    ],
    'after the claims, each secret once',
  );
  t.notOk(pod.spec?.imagePullSecrets, 'not as pull secrets: they are CDI credentials (accessKeyId, secretKey), not a docker config');
});

t.test("the images' pull secrets are the pod's imagePullSecrets, once each, as KubeVirt sets them", async (t) => {
  const pod = launcherPodFor(
    vmi({
      domain: {
        resources: { requests: { memory: '128Mi' } },
        firmware: { kernelBoot: { container: { image: 'k', kernelPath: '/vmlinuz', imagePullSecret: 'kernel-pull' } } },
      },
      volumes: [
        { name: 'root', containerDisk: { image: 'a', imagePullSecret: 'disk-pull' } },
        { name: 'data', containerDisk: { image: 'b', imagePullSecret: 'disk-pull' } },
        { name: 'public', containerDisk: { image: 'c' } },
      ],
    }),
    'kvm',
  );
  t.same(pod.spec?.imagePullSecrets, [{ name: 'disk-pull' }, { name: 'kernel-pull' }]);
  t.notOk(launcherPodFor(vmi(), 'kvm').spec?.imagePullSecrets, 'none without pull secrets');
});

t.test('sized for TCG when a schedulable node the VMI may land on runs VMs under TCG', async (t) => {
  const node = (name: string, labels: Record<string, string>): V1Node => ({
    metadata: { name, labels: { 'kubevirt.io/schedulable': 'true', ...labels } },
  });
  const kvm = node('a', { 'vkvm.io/virtualization': 'kvm', zone: 'a' });
  const tcg = node('b', { 'vkvm.io/virtualization': 'tcg', zone: 'b' });
  const unschedulable: V1Node = { metadata: { name: 'c', labels: { 'vkvm.io/virtualization': 'tcg' } } };
  t.same(
    [
      launcherAccelerator(vmi(), [kvm]),
      launcherAccelerator(vmi(), [kvm, tcg]),
      launcherAccelerator(vmi({ nodeSelector: { zone: 'a' } }), [kvm, tcg]),
      launcherAccelerator(vmi(), [kvm, unschedulable]),
      launcherAccelerator(vmi(), []),
    ],
    ['kvm', 'tcg', 'kvm', 'kvm', 'kvm'],
    'KVM only nodes, a TCG node, a nodeSelector that excludes it, an unschedulable one, none',
  );
  t.match(launcherPodFor(vmi(), 'tcg').spec?.containers?.[0]?.resources?.requests, {
    memory: `${128 + 2 + FIXED_OVERHEAD_MIB + PER_VCPU_OVERHEAD_MIB + TCG_OVERHEAD_MIB + GRAPHICS_OVERHEAD_MIB}Mi`,
  });
});

t.test('guest memory and vCPUs are read as translate.ts reads them', async (t) => {
  t.same(
    vmiCompute(vmi({ domain: { memory: { guest: '2Gi' }, resources: { requests: { memory: '1Gi' } } } })),
    { memoryMiB: 2048, vcpus: 1 },
    'memory.guest wins',
  );
  t.same(
    vmiCompute(vmi({ domain: { resources: { limits: { memory: '512Mi', cpu: '2.5' } } } })),
    { memoryMiB: 512, vcpus: 3 },
    'limits when nothing else',
  );
  t.same(
    vmiCompute(vmi({ domain: { cpu: { cores: 2, sockets: 2 }, resources: { requests: { memory: '64M', cpu: '8' } } } })),
    { memoryMiB: 62, vcpus: 4 },
    'an explicit topology wins over cpu resources',
  );
  t.equal(
    launcherMemoryRequestMiB(vmi({ domain: { cpu: { cores: 4 }, resources: { requests: { memory: '1Gi' } } } }), 'kvm'),
    1024 + 16 + FIXED_OVERHEAD_MIB + 4 * PER_VCPU_OVERHEAD_MIB + GRAPHICS_OVERHEAD_MIB,
  );
  t.equal(
    launcherMemoryRequestMiB(
      vmi({ domain: { devices: { autoattachGraphicsDevice: false }, resources: { requests: { memory: '1Gi' } } } }),
      'kvm',
    ),
    1024 + 16 + FIXED_OVERHEAD_MIB + PER_VCPU_OVERHEAD_MIB,
    'no display, no video memory',
  );
});

t.test('the launcher pod of a VMI is found by its created-by label, live pods before deleted ones', async (t) => {
  const pod = (name: string, uid: string, created: string, deleting = false): V1Pod => ({
    metadata: {
      name,
      namespace: 'ns1',
      labels: { 'kubevirt.io/created-by': uid },
      creationTimestamp: new Date(created),
      ...(deleting ? { deletionTimestamp: new Date(created) } : {}),
    },
  });
  const pods = [
    pod('other', 'x', '2026-01-01T00:00:03Z'),
    pod('old', 'vmi-uid', '2026-01-01T00:00:01Z'),
    pod('gone', 'vmi-uid', '2026-01-01T00:00:05Z', true),
    pod('new', 'vmi-uid', '2026-01-01T00:00:02Z'),
  ];
  t.equal(launcherPodOf(vmi(), pods)?.metadata?.name, 'new');
  t.equal(launcherPodOf(vmi(), [pods[0]!]), undefined, 'another VMI’s pod is not this one’s');
});

t.test("a live migration's target pod is the VMI's pod only once the VMI runs on its node", async (t) => {
  const pod = (name: string, nodeName: string, target: boolean, created: string) => ({
    metadata: {
      name,
      namespace: 'ns1',
      labels: { 'kubevirt.io/created-by': 'vmi-uid', ...(target ? { 'kubevirt.io/migrationJobUID': 'm-1' } : {}) },
      creationTimestamp: new Date(created),
    },
    spec: { nodeName, containers: [] },
  });
  const source = pod('source', 'a', false, '2026-01-01T00:00:01Z');
  const target = pod('target', 'b', true, '2026-01-01T00:00:02Z');
  const on = (nodeName?: string) => ({ ...vmi(), status: nodeName ? { nodeName } : {} });
  t.same(
    [launcherPodOf(on('a'), [source, target]), launcherPodOf(on(), [target]), launcherPodOf(on('b'), [source, target])].map(
      (p) => p?.metadata?.name,
    ),
    ['source', undefined, 'target'],
  );
});

t.test(
  "the launcher pod's ephemeral-storage request charges the VMI's emptyDisk and DiskOrCreate capacities, capped at its limit",
  async (t) => {
    const withDisks = (resources: object) =>
      launcherPodFor(
        vmi({
          domain: { resources },
          volumes: [
            { name: 'root', containerDisk: { image: 'quay.io/containerdisks/fedora:40' } },
            { name: 'scratch', emptyDisk: { capacity: '64Mi' } },
            { name: 'made', hostDisk: { path: '/disks/a.img', type: 'DiskOrCreate', capacity: '32Mi' } },
            { name: 'existing', hostDisk: { path: '/disks/b.img', type: 'Disk' } },
          ],
        }),
        'kvm',
      ).spec?.containers?.[0]?.resources;
    const memory = launcherPodFor(vmi(), 'kvm').spec!.containers[0]!.resources!.requests!.memory;
    t.same(
      {
        noneAsked: launcherPodFor(vmi(), 'kvm').spec?.containers?.[0]?.resources?.requests?.['ephemeral-storage'],
        disksOnly: withDisks({ requests: { memory: '128Mi' } }),
        withRequestAndLimit: withDisks({
          requests: { memory: '128Mi', 'ephemeral-storage': '100Mi' },
          limits: { 'ephemeral-storage': '1Gi' },
        }),
        limitBelowDisks: withDisks({ requests: { memory: '128Mi' }, limits: { 'ephemeral-storage': '64Mi' } }),
      },
      {
        noneAsked: undefined,
        disksOnly: { requests: { memory: memory, cpu: '100m', 'ephemeral-storage': '96Mi' } },
        withRequestAndLimit: {
          requests: { memory: memory, cpu: '100m', 'ephemeral-storage': '196Mi' },
          limits: { 'ephemeral-storage': '1Gi' },
        },
        limitBelowDisks: {
          requests: { memory: memory, cpu: '100m', 'ephemeral-storage': '64Mi' },
          limits: { 'ephemeral-storage': '64Mi' },
        },
      },
    );
  },
);

import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { SpecError } from '../../vmm/errors.js';
import { atPodFields, translatePod } from './translate.js';
import type { VmSpec } from '../../vmm/spec.js';

const TEST_GUEST = 'localhost/vkvm/test-guest:v1';
const pod = (container: Record<string, unknown>, annotations: Record<string, string> = {}): V1Pod => ({
  metadata: { name: 'vm1', namespace: 'ns', uid: '0b6a3c1e-2d7a-4c8e-9b55-0d2f1e3a4b5c', annotations },
  spec: {
    containers: [
      { name: 'vm', ...container } as V1Pod['spec'] extends infer S ? (S extends { containers: Array<infer C> } ? C : never) : never,
    ],
  },
});

t.test('a kernel image boots with its initrd, and args and env on the command line', async (t) => {
  const spec = translatePod(
    pod(
      {
        image: 'kernel:/c/vmlinux',
        args: ['loglevel=3'],
        env: [{ name: 'MODE', value: 'e2e' }],
        resources: { limits: { cpu: '1500m', memory: '128Mi' } },
      },
      { 'vkvm.io/initrd': '/c/initrd', 'vkvm.io/kernel-cmdline': 'console=ttyS0 quiet' },
    ),
  );
  t.match(spec, {
    uid: '0b6a3c1e-2d7a-4c8e-9b55-0d2f1e3a4b5c',
    name: 'ns_vm1',
    cpu: { sockets: 1, cores: 2, threads: 1, limitMillicores: 1500 },
    memoryMiB: 128,
    kernelBoot: { kernelPath: '/c/vmlinux', initrdPath: '/c/initrd', cmdline: 'console=ttyS0 quiet MODE=e2e loglevel=3' },
    disks: [],
    guestAgent: true,
    vnc: true,
  });
});

t.test('guest memory is the memory request the scheduler charged, not the limit', async (t) => {
  const memoryOf = (resources: object) => (translatePod(pod({ image: TEST_GUEST, resources })) as { memoryMiB: number }).memoryMiB;
  t.same(
    [
      memoryOf({ requests: { memory: '64Mi' }, limits: { memory: '2Gi' } }),
      memoryOf({ limits: { memory: '256Mi' } }),
      memoryOf({ requests: { memory: '96Mi' } }),
      memoryOf({}),
    ],
    [64, 256, 96, 512],
    'request; the limit when only it is set (the API server defaults the request to it); the default without either',
  );
  const err = translatePod(pod({ image: TEST_GUEST, resources: { requests: { memory: '16Mi' }, limits: { memory: '1Gi' } } }));
  t.match(
    err,
    { causes: [{ path: 'spec.containers[0].resources.requests.memory', reason: 'FieldValueInvalid' }] },
    'a too-small request is named',
  );
});

t.test('disk images become a virtio boot disk; user-data a cloud-init cdrom; requests are used without limits', async (t) => {
  const spec = translatePod(
    pod(
      { image: 'https://img.example/disk.qcow2', resources: { requests: { cpu: '2', memory: '1Gi' } } },
      { 'vkvm.io/user-data': '#cloud-config\n' },
    ),
  );
  t.match(spec, {
    cpu: { cores: 2 },
    memoryMiB: 1024,
    disks: [
      { name: 'root', bus: 'virtio', bootOrder: 1, source: { kind: 'url', url: 'https://img.example/disk.qcow2' } },
      { name: 'cloudinit', device: 'cdrom', source: { kind: 'cloudInit', userData: '#cloud-config\n' } },
    ],
  });
  t.notOk((spec as { cpu: { limitMillicores?: number } }).cpu.limitMillicores, 'no CPU limit without limits.cpu');
  t.match(translatePod(pod({ image: '/var/lib/images/d.raw' })), {
    memoryMiB: 512,
    cpu: { cores: 1 },
    disks: [{ source: { kind: 'image', path: '/var/lib/images/d.raw' } }],
  });
});

t.test(
  'an OCI reference is a registry disk the node pulls, with the pull policy the API server defaulted, else Kubernetes’ default',
  async (t) => {
    const source = (container: Record<string, unknown>) =>
      (translatePod(pod(container)) as { disks: Array<{ source: unknown }> }).disks[0]?.source;
    t.same(
      [
        source({ image: 'quay.io/containerdisks/fedora:41', imagePullPolicy: 'Never' }),
        source({ image: 'quay.io/containerdisks/fedora:41' }),
        source({ image: 'registry.local:5000/disk' }),
        source({ image: 'Not A Reference' }),
      ],
      [
        { kind: 'registry', image: 'quay.io/containerdisks/fedora:41', pullPolicy: 'Never' },
        { kind: 'registry', image: 'quay.io/containerdisks/fedora:41', pullPolicy: 'IfNotPresent' },
        { kind: 'registry', image: 'registry.local:5000/disk', pullPolicy: 'Always' },
        { kind: 'registry', image: 'Not A Reference', pullPolicy: 'IfNotPresent' },
      ],
      'an unparseable name is the pull’s to report (InvalidImageName), as the kubelet does',
    );
  },
);

t.test('every unrealizable field is named', async (t) => {
  const err = translatePod(
    pod({
      image: '',
      imagePullPolicy: 'Sometimes',
      command: ['/bin/sh'],
      resources: { limits: { memory: '16Mi', cpu: 'lots' } },
    }),
  );
  t.ok(err instanceof SpecError);
  t.same(
    (err as SpecError).causes.map((c) => c.path),
    [
      'spec.containers[0].image',
      'spec.containers[0].command',
      'spec.containers[0].resources.limits.cpu',
      'spec.containers[0].resources.limits.memory',
    ],
  );
  const two = translatePod({
    ...pod({ image: TEST_GUEST }),
    spec: {
      containers: [
        { name: 'a', image: TEST_GUEST },
        { name: 'b', image: 'x' },
      ],
    },
  });
  t.match(translatePod(pod({ image: 'quay.io/a/b:1', imagePullPolicy: 'Sometimes' })), {
    causes: [{ path: 'spec.containers[0].imagePullPolicy', reason: 'FieldValueNotSupported' }],
  });
  t.match(two, { causes: [{ path: 'spec.containers', message: /exactly one container/ }] });
  t.match(translatePod(pod({ image: '/d.qcow2', args: ['x'] })), {
    causes: [{ path: 'spec.containers[0].args', reason: 'FieldValueNotSupported' }],
  });
});

t.test('the pod network: bridge by default, masquerade forwarding the container ports, none, bad values named', async (t) => {
  const nic = (container: Record<string, unknown>, annotations: Record<string, string> = {}) => {
    const spec = translatePod(pod({ image: TEST_GUEST, ...container }, annotations));
    return spec instanceof SpecError ? spec.causes : spec.interfaces;
  };
  const bridge = nic({});
  t.same(bridge, [{ name: 'default', binding: 'bridge', mac: bridge[0] && 'mac' in bridge[0] ? bridge[0].mac : '' }], 'one bridge NIC');
  t.match(bridge, [{ mac: /^52:54:00(:[0-9a-f]{2}){3}$/ }], 'a locally administered MAC');
  t.same(nic({}), bridge, 'derived from the pod UID: stable across syncs and restarts');
  t.same(
    nic(
      {
        ports: [
          { containerPort: 80, name: 'http' },
          { containerPort: 53, protocol: 'UDP' },
        ],
      },
      { 'vkvm.io/pod-network': 'masquerade' },
    ),
    [
      {
        ...bridge[0],
        binding: 'masquerade',
        forwardPorts: [
          { protocol: 'TCP', port: 80, name: 'http' },
          { protocol: 'UDP', port: 53 },
        ],
      },
    ],
    'masquerade forwards the container ports',
  );
  t.same(nic({}, { 'vkvm.io/pod-network': 'none' }), [], 'none: no NIC');
  t.same(
    nic({ ports: [{ containerPort: 9, protocol: 'SCTP' }] }, { 'vkvm.io/pod-network': 'nat' }),
    [
      {
        path: 'metadata.annotations[vkvm.io/pod-network]',
        reason: 'FieldValueNotSupported',
        message: '"nat" is not one of bridge, masquerade, none',
      },
      {
        path: 'spec.containers[0].ports[0].protocol',
        reason: 'FieldValueNotSupported',
        message: 'only TCP and UDP ports can be forwarded to a VM',
      },
    ],
    'bad values are named',
  );
});

t.test("causes found after translation are renamed to the pod's fields", async (t) => {
  const disk = translatePod(pod({ image: '/srv/images/d.qcow2' }, { 'vkvm.io/user-data': '#cloud-config\n' })) as VmSpec;
  const kernel = translatePod(pod({ image: 'kernel:/srv/k/vmlinuz' }, { 'vkvm.io/initrd': '/srv/k/initrd' })) as VmSpec;
  const cause = (path: string) => ({ path, reason: 'FieldValueForbidden' as const, message: 'no' });
  t.same(
    [
      ...atPodFields(disk)([cause('disks[0].source.path'), cause('disks[1].source.userData')]),
      ...atPodFields(kernel)([cause('kernelBoot.kernelPath'), cause('kernelBoot.initrdPath'), cause('memoryMiB')]),
      ...atPodFields(disk)([cause('interfaces[0].mac')]),
    ].map((c) => c.path),
    [
      'spec.containers[0].image',
      'metadata.annotations[vkvm.io/user-data]',
      'spec.containers[0].image',
      'metadata.annotations[vkvm.io/initrd]',
      'memoryMiB',
      // A pod's MAC is derived from its UID.
      'metadata.uid',
    ],
  );
});

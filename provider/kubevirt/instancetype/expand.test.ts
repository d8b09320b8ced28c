import t from 'tap';
import { expandTemplate, type Resolved } from './expand.js';
import { applyPreference, unmetRequirement } from './preference.js';
import type { InstancetypeSpec, PreferenceSpec, VirtualMachine } from '../types.js';

const vm = (template: VirtualMachine['spec']['template']['spec'], annotations?: Record<string, string>): VirtualMachine => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'vm-uid' },
  spec: { runStrategy: 'Always', template: { ...(annotations ? { metadata: { annotations } } : {}), spec: template } },
});
const cluster = <S>(kind: string, name: string, spec: S) => ({ kind, metadata: { name, uid: `${name}-uid`, generation: 1 }, spec });
const u1nano = cluster<InstancetypeSpec>('VirtualMachineClusterInstancetype', 'u1.nano', { cpu: { guest: 1 }, memory: { guest: '512Mi' } });
const alpine = cluster<PreferenceSpec>('VirtualMachineClusterPreference', 'alpine', {
  annotations: { 'vm.kubevirt.io/os': 'linux' },
  devices: { preferredDiskBus: 'virtio', preferredInterfaceModel: 'virtio' },
  requirements: { cpu: { guest: 1 }, memory: { guest: '512Mi' } },
});

t.test("a u1.nano VM with the alpine preference: the VMI template KubeVirt's VM controller makes", async (t) => {
  const expanded = expandTemplate(
    vm({
      domain: { devices: { interfaces: [{ name: 'default', masquerade: {} }] } },
      networks: [{ name: 'default', pod: {} }],
      volumes: [{ name: 'containerdisk', containerDisk: { image: 'img' } }],
    }),
    { instancetype: u1nano, preference: alpine } as Resolved,
  );
  t.same(expanded, {
    ok: true,
    template: {
      metadata: { annotations: { 'vm.kubevirt.io/os': 'linux' } },
      spec: {
        domain: {
          devices: {
            interfaces: [{ name: 'default', masquerade: {}, model: 'virtio' }],
            disks: [{ name: 'containerdisk', disk: { bus: 'virtio' } }],
          },
          cpu: { sockets: 1, cores: 1, threads: 1 },
          memory: { guest: '512Mi' },
        },
        networks: [{ name: 'default', pod: {} }],
        volumes: [{ name: 'containerdisk', containerDisk: { image: 'img' } }],
      },
    },
  });
});

t.test('what refuses a VM names the field, as KubeVirt words it', async (t) => {
  const plain = vm({ domain: {} });
  t.same(
    {
      conflict: expandTemplate(vm({ domain: { cpu: { threads: 2 } } }), { instancetype: u1nano } as Resolved),
      requirement: expandTemplate(plain, {
        instancetype: u1nano,
        preference: { ...alpine, spec: { requirements: { memory: { guest: '2Gi' } } } },
      } as Resolved),
      cx1: expandTemplate(plain, {
        instancetype: cluster('VirtualMachineClusterInstancetype', 'cx1.medium', {
          cpu: { guest: 1, dedicatedCPUPlacement: true },
          memory: { guest: '2Gi' },
        }),
      } as Resolved),
    },
    {
      conflict: {
        ok: false,
        field: 'spec.template.spec.domain.cpu.threads',
        message: 'VM field(s) spec.template.spec.domain.cpu.threads conflicts with selected instance type',
      },
      requirement: {
        ok: false,
        field: 'spec.instancetype',
        message:
          'failure checking preference requirements: insufficient Memory resources of 512Mi provided by instance type, preference requires 2Gi',
      },
      cx1: {
        ok: false,
        field: 'spec.instancetype',
        message: 'VirtualMachineClusterInstancetype cx1.medium asks for what vkvm does not provide: spec.cpu.dedicatedCPUPlacement',
      },
    },
  );
  t.same(expandTemplate(plain, {}), { ok: true, template: plain.spec.template }, 'a VM that names neither is its own expansion');
});

t.test(
  "a preference fills what the VM leaves unset and never overrides it; requirements without an instancetype read the VM's CPU",
  async (t) => {
    t.same(
      applyPreference(
        {
          devices: {
            preferredDiskBus: 'sata',
            preferredCdromBus: 'scsi',
            preferredAutoattachGraphicsDevice: false,
            preferredDiskDedicatedIoThread: true,
            preferredBlockMultiQueue: true,
          },
          firmware: { preferredEfi: { secureBoot: false } },
          machine: { preferredMachineType: 'q35' },
          preferredTerminationGracePeriodSeconds: 30,
          features: { preferredSmm: {} },
        },
        {
          domain: {
            devices: {
              disks: [
                { name: 'a' },
                { name: 'b', disk: { bus: 'virtio' } },
                { name: 'c', cdrom: {} },
                { name: 'd', disk: { bus: 'virtio' }, dedicatedIOThread: false },
              ],
            },
            machine: { type: 'pc' },
          },
          terminationGracePeriodSeconds: 0,
        },
      ),
      {
        domain: {
          devices: {
            disks: [
              // KubeVirt's rule: a dedicated iothread for virtio disks that do not say.
              { name: 'a', disk: { bus: 'sata' } },
              { name: 'b', disk: { bus: 'virtio' }, dedicatedIOThread: true },
              { name: 'c', cdrom: { bus: 'scsi' } },
              { name: 'd', disk: { bus: 'virtio' }, dedicatedIOThread: false },
            ],
            autoattachGraphicsDevice: false,
            blockMultiQueue: true,
          },
          machine: { type: 'pc' },
          features: { smm: {} },
          firmware: { bootloader: { efi: { secureBoot: false } } },
        },
        terminationGracePeriodSeconds: 0,
      },
    );
    const needs2: PreferenceSpec = { requirements: { cpu: { guest: 2 } }, cpu: { preferredCPUTopology: 'cores' } };
    t.same(
      [
        unmetRequirement(needs2, undefined, { domain: {} }),
        unmetRequirement(needs2, undefined, { domain: { cpu: { cores: 1, sockets: 4 } } }),
        unmetRequirement(needs2, undefined, { domain: { cpu: { cores: 2 } } }),
      ],
      [
        ['spec.template.spec.domain.cpu', 'no CPU resources provided by VirtualMachine, preference requires 2 vCPU'],
        [
          'spec.template.spec.domain.cpu.cores',
          'insufficient CPU resources of 1 vCPU provided by VirtualMachine, preference requires 2 vCPU provided as cores',
        ],
        undefined,
      ],
    );
  },
);

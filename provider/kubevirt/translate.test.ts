import t from 'tap';
import { parse } from 'yaml';
import { SpecError } from '../../vmm/errors.js';
import { translateVmi, vmiReferences, type VmiTranslateContext, type VmiTranslation } from './translate.js';
import type { VirtualMachine, VirtualMachineInstance } from './types.js';

// KubeVirt's quickstart VM (kubevirt.io "Use KubeVirt" lab, testvm), with the
// emptyDisk, runStrategy, core count and machine type of the smoke test.
const SMOKE_VM = `
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: testvm
  namespace: default
  uid: 0f7c8f86-5d35-4c3a-9a51-2d9b3c1f7e20
spec:
  runStrategy: Always
  template:
    metadata:
      labels:
        kubevirt.io/size: small
        kubevirt.io/domain: testvm
    spec:
      domain:
        cpu:
          cores: 1
        machine:
          type: q35
        devices:
          disks:
            - name: containerdisk
              disk:
                bus: virtio
            - name: emptydisk
              disk:
                bus: virtio
            - name: cloudinitdisk
              disk:
                bus: virtio
          interfaces:
            - name: default
              masquerade: {}
        resources:
          requests:
            memory: 64M
      networks:
        - name: default
          pod: {}
      volumes:
        - name: containerdisk
          containerDisk:
            image: quay.io/kubevirt/cirros-container-disk-demo
        - name: emptydisk
          emptyDisk:
            capacity: 2Gi
        - name: cloudinitdisk
          cloudInitNoCloud:
            userDataBase64: SGkuXG4=
`;

const VMI_UID = '6a1e2c3d-4b5f-4a6b-8c7d-9e0f1a2b3c4d';
const FIRMWARE_UUID = '5d307ca9-b3ef-428c-8861-06e72d69f223';

/** The VMI KubeVirt's VM controller makes of a VM (setupVMIFromVM), as the API server returns it. */
function vmiOf(vm: VirtualMachine, uid = VMI_UID): VirtualMachineInstance {
  const spec = structuredClone(vm.spec.template.spec);
  spec.domain.firmware = { ...spec.domain.firmware, uuid: spec.domain.firmware?.uuid ?? FIRMWARE_UUID };
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstance',
    metadata: {
      name: vm.metadata.name!,
      namespace: vm.metadata.namespace!,
      uid,
      labels: { ...vm.spec.template.metadata?.labels },
      ownerReferences: [
        { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachine', name: vm.metadata.name!, uid: vm.metadata.uid!, controller: true },
      ],
    },
    spec,
  };
}

const smokeVmi = (): VirtualMachineInstance => vmiOf(parse(SMOKE_VM) as VirtualMachine);

const ctx = (over: Partial<VmiTranslateContext> = {}): VmiTranslateContext => ({
  secrets: {},
  pvcs: {},
  ...over,
});

const ok = (result: VmiTranslation | SpecError): VmiTranslation => {
  if (result instanceof SpecError) throw result;
  return result;
};
const causesOf = (result: VmiTranslation | SpecError) =>
  result instanceof SpecError ? result.causes.map((c) => [c.path, c.reason]) : result;

/** A smoke VMI changed by `edit`. */
const smokeWith = (edit: (vmi: VirtualMachineInstance) => void): VirtualMachineInstance => {
  const vmi = smokeVmi();
  edit(vmi);
  return vmi;
};

t.test("KubeVirt's smoke VM becomes the expected VmSpec", async (t) => {
  const { atKubevirtFields: _, ...translated } = ok(translateVmi(smokeVmi(), ctx()));
  t.same(
    translated,
    {
      spec: {
        version: 1,
        uid: VMI_UID,
        systemUuid: FIRMWARE_UUID,
        name: 'default_testvm',
        machineType: 'q35',
        cpu: { sockets: 1, cores: 1, threads: 1 },
        // 64M is 64,000,000 bytes: 61.04 MiB, rounded up.
        memoryMiB: 62,
        firmware: { kind: 'bios' },
        disks: [
          {
            name: 'containerdisk',
            device: 'disk',
            bus: 'virtio',
            // An ordinary image the node pulls; latest defaults to Always, as in KubeVirt.
            source: { kind: 'registry', image: 'quay.io/kubevirt/cirros-container-disk-demo', pullPolicy: 'Always' },
          },
          { name: 'emptydisk', device: 'disk', bus: 'virtio', source: { kind: 'empty', sizeMiB: 2048 } },
          {
            name: 'cloudinitdisk',
            device: 'disk',
            bus: 'virtio',
            source: { kind: 'cloudInit', userData: 'Hi.\\n', metaData: `{"instance-id":"${FIRMWARE_UUID}","local-hostname":"testvm"}` },
          },
        ],
        interfaces: [{ name: 'default', binding: 'masquerade', mac: '52:54:00:05:c0:8b' }],
        guestAgent: true,
        vnc: true,
        acpi: true,
        labels: { 'vkvm.io/namespace': 'default', 'vkvm.io/vmi': 'testvm', 'vkvm.io/vm': 'testvm' },
      },
      unsupported: [],
    },
    'containerDisk is a registry image, emptyDisk a new disk, cloudInitNoCloud a seed on its virtio disk',
  );
});

t.test('a VNC display unless autoattachGraphicsDevice is false, as KubeVirt decides', async (t) => {
  const display = (value: boolean | undefined) =>
    ok(
      translateVmi(
        smokeWith((v) => {
          if (value !== undefined) v.spec.domain.devices!.autoattachGraphicsDevice = value;
        }),
        ctx(),
      ),
    );
  t.same(
    [undefined, true, false].map((v) => ({ vnc: display(v).spec.vnc, unsupported: display(v).unsupported })),
    [
      { vnc: true, unsupported: [] },
      { vnc: true, unsupported: [] },
      { vnc: false, unsupported: [] },
    ],
  );
});

t.test('OCI images: a containerDisk (its path, KubeVirt-defaulted pull policy) and a kernelBoot container the node pulls', async (t) => {
  const vmi = smokeWith((v) => {
    Object.assign(v.spec.volumes![0]!.containerDisk!, {
      image: 'quay.io/containerdisks/fedora:41',
      path: '/disk/fedora.qcow2',
      imagePullSecret: 'pull',
    });
    v.spec.domain.firmware = {
      kernelBoot: {
        kernelArgs: 'console=ttyS0',
        container: { image: 'registry.local/kernels/test:latest', kernelPath: '/boot/vmlinuz', initrdPath: '/boot/initrd.img' },
      },
    };
  });
  const { spec, unsupported } = ok(translateVmi(vmi, ctx()));
  t.same(
    { root: spec.disks[0]!.source, kernelBoot: spec.kernelBoot, unsupported },
    {
      root: { kind: 'registry', image: 'quay.io/containerdisks/fedora:41', path: '/disk/fedora.qcow2', pullPolicy: 'IfNotPresent' },
      kernelBoot: {
        kernelPath: '/boot/vmlinuz',
        initrdPath: '/boot/initrd.img',
        cmdline: 'console=ttyS0',
        container: { image: 'registry.local/kernels/test:latest', pullPolicy: 'Always' },
      },
      unsupported: [],
    },
    'paths inside the images; nothing is marked as from the image store (only the pull step may)',
  );
});

t.test('every invalid field is named, at its KubeVirt path', async (t) => {
  const cases: Array<[string, (v: VirtualMachineInstance) => void, Array<[string, string]>, VmiTranslateContext?]> = [
    ['no memory', (v) => delete v.spec.domain.resources, [['spec.domain.resources.requests.memory', 'FieldValueRequired']]],
    [
      'a disk naming an unknown volume',
      (v) => (v.spec.domain.devices!.disks![1]!.name = 'scratch'),
      [
        ['spec.domain.devices.disks[1].name', 'FieldValueNotFound'],
        ['spec.volumes[1].name', 'FieldValueInvalid'],
      ],
    ],
    [
      'a volume without a disk (KubeVirt admits no such VMI)',
      (v) => v.spec.volumes!.push({ name: 'spare', emptyDisk: { capacity: '1Gi' } }),
      [['spec.volumes[3].name', 'FieldValueInvalid']],
    ],
    [
      'two disks with the same bootOrder',
      (v) => {
        v.spec.domain.devices!.disks![0]!.bootOrder = 1;
        v.spec.domain.devices!.disks![2]!.bootOrder = 1;
      },
      [['spec.domain.devices.disks[2].bootOrder', 'FieldValueDuplicate']],
    ],
    [
      'a boot order below 1',
      (v) => (v.spec.domain.devices!.disks![0]!.bootOrder = 0),
      [['spec.domain.devices.disks[0].bootOrder', 'FieldValueInvalid']],
    ],
    [
      'an unknown bus',
      (v) => (v.spec.domain.devices!.disks![1]!.disk!.bus = 'floppy'),
      [['spec.domain.devices.disks[1].disk.bus', 'FieldValueNotSupported']],
    ],
    [
      'unknown disk cache and io modes, and native AIO with a host cache',
      (v) => {
        Object.assign(v.spec.domain.devices!.disks![0]!, { cache: 'unsafe', io: 'io_uring' });
        Object.assign(v.spec.domain.devices!.disks![1]!, { cache: 'writeback', io: 'native' });
      },
      [
        ['spec.domain.devices.disks[0].cache', 'FieldValueInvalid'],
        ['spec.domain.devices.disks[0].io', 'FieldValueNotSupported'],
        ['spec.domain.devices.disks[1].io', 'FieldValueInvalid'],
      ],
    ],
    [
      'the IDE bus',
      (v) => (v.spec.domain.devices!.disks![1]!.disk!.bus = 'ide'),
      [['spec.domain.devices.disks[1].disk.bus', 'FieldValueNotSupported']],
    ],
    [
      'the usb bus (KubeVirt has it, vkvm does not)',
      (v) => (v.spec.domain.devices!.disks![1]!.disk!.bus = 'usb'),
      [['spec.domain.devices.disks[1].disk.bus', 'FieldValueNotSupported']],
    ],
    [
      'a virtio CD-ROM',
      (v) => (v.spec.domain.devices!.disks![2] = { name: 'cloudinitdisk', cdrom: { bus: 'virtio' } }),
      [['spec.domain.devices.disks[2].cdrom.bus', 'FieldValueInvalid']],
    ],
    [
      'a read-only sata disk',
      (v) => (v.spec.domain.devices!.disks![0]!.disk = { bus: 'sata', readonly: true }),
      [['spec.domain.devices.disks[0].disk.bus', 'FieldValueInvalid']],
    ],
    [
      'two targets on one disk',
      (v) => (v.spec.domain.devices!.disks![1] = { name: 'emptydisk', disk: {}, cdrom: {} }),
      [['spec.domain.devices.disks[1]', 'FieldValueInvalid']],
    ],
    [
      'a disk name that is not a DNS label',
      (v) => {
        v.spec.domain.devices!.disks![1]!.name = 'Empty_Disk';
        v.spec.volumes![1]!.name = 'Empty_Disk';
      },
      [['spec.domain.devices.disks[1].name', 'FieldValueInvalid']],
    ],
    [
      'an empty disk with a bad capacity',
      (v) => (v.spec.volumes![1]!.emptyDisk!.capacity = 'big'),
      [['spec.volumes[1].emptyDisk.capacity', 'FieldValueInvalid']],
    ],
    [
      'a containerDisk path that is not clean',
      (v) => Object.assign(v.spec.volumes![0]!.containerDisk!, { image: 'quay.io/containerdisks/fedora:40', path: 'disk/../etc/shadow' }),
      [['spec.volumes[0].containerDisk.path', 'FieldValueInvalid']],
    ],
    [
      'an unknown pull policy',
      (v) => Object.assign(v.spec.volumes![0]!.containerDisk!, { image: 'quay.io/containerdisks/fedora:40', imagePullPolicy: 'Sometimes' }),
      [['spec.volumes[0].containerDisk.imagePullPolicy', 'FieldValueNotSupported']],
    ],
    [
      'two user-data sources',
      (v) => (v.spec.volumes![2]!.cloudInitNoCloud!.userData = '#cloud-config\n'),
      [['spec.volumes[2].cloudInitNoCloud', 'FieldValueInvalid']],
    ],
    [
      'bad base64',
      (v) => (v.spec.volumes![2]!.cloudInitNoCloud!.userDataBase64 = 'not base64!'),
      [['spec.volumes[2].cloudInitNoCloud.userDataBase64', 'FieldValueInvalid']],
    ],
    [
      'a user-data Secret that is not there',
      (v) => (v.spec.volumes![2]!.cloudInitNoCloud = { secretRef: { name: 'init' } }),
      [['spec.volumes[2].cloudInitNoCloud.secretRef', 'FieldValueNotFound']],
    ],
    [
      'a cloud-init volume with no data',
      (v) => (v.spec.volumes![2]!.cloudInitNoCloud = {}),
      [['spec.volumes[2].cloudInitNoCloud', 'FieldValueRequired']],
    ],
    [
      'secure boot (the efi default) without SMM',
      (v) => (v.spec.domain.firmware!.bootloader = { efi: {} }),
      [['spec.domain.firmware.bootloader.efi.secureBoot', 'FieldValueInvalid']],
    ],
    [
      'both bios and efi',
      (v) => (v.spec.domain.firmware!.bootloader = { bios: {}, efi: { secureBoot: false } }),
      [['spec.domain.firmware.bootloader', 'FieldValueInvalid']],
    ],
    [
      'a malformed MAC',
      (v) => (v.spec.domain.devices!.interfaces![0]!.macAddress = 'de:ad:be:ef'),
      [['spec.domain.devices.interfaces[0].macAddress', 'FieldValueInvalid']],
    ],
    [
      "masquerade on the in-pod bridge's MAC",
      (v) => (v.spec.domain.devices!.interfaces![0]!.macAddress = '02:00:00:00:00:00'),
      [['spec.domain.devices.interfaces[0].macAddress', 'FieldValueInvalid']],
    ],
    [
      'a multicast MAC (found by vmm, reported at the KubeVirt field)',
      (v) => (v.spec.domain.devices!.interfaces![0]!.macAddress = '01:00:5e:00:00:01'),
      [['spec.domain.devices.interfaces[0].macAddress', 'FieldValueInvalid']],
    ],
    [
      'the broadcast MAC',
      (v) => (v.spec.domain.devices!.interfaces![0]!.macAddress = 'FF:FF:FF:FF:FF:FF'),
      [['spec.domain.devices.interfaces[0].macAddress', 'FieldValueInvalid']],
    ],
    [
      'the all-zero MAC',
      (v) => (v.spec.domain.devices!.interfaces![0]!.macAddress = '00-00-00-00-00-00'),
      [['spec.domain.devices.interfaces[0].macAddress', 'FieldValueInvalid']],
    ],
    [
      'an interface without a network, and a network without an interface',
      (v) => (v.spec.networks![0]!.name = 'pod'),
      [
        ['spec.networks[0].name', 'FieldValueRequired'],
        ['spec.domain.devices.interfaces[0].name', 'FieldValueNotFound'],
      ],
    ],
    [
      'a NIC model vkvm does not emulate',
      (v) => (v.spec.domain.devices!.interfaces![0]!.model = 'e1000e'),
      [['spec.domain.devices.interfaces[0].model', 'FieldValueNotSupported']],
    ],
    [
      'a port out of range',
      (v) => (v.spec.domain.devices!.interfaces![0]!.ports = [{ port: 70000 }]),
      [['spec.domain.devices.interfaces[0].ports[0]', 'FieldValueInvalid']],
    ],
    [
      'memory below what a VM needs (found by vmm)',
      (v) => (v.spec.domain.resources = { requests: { memory: '16Mi' } }),
      [['spec.domain.resources.requests.memory', 'FieldValueInvalid']],
    ],
    [
      'guest memory above the limit',
      (v) => {
        v.spec.domain.memory = { guest: '1Gi' };
        v.spec.domain.resources = { limits: { memory: '512Mi' } };
      },
      [['spec.domain.memory.guest', 'FieldValueInvalid']],
    ],
    [
      'more vCPUs than QEMU allows (found by vmm)',
      (v) => (v.spec.domain.cpu = { sockets: 16, cores: 32 }),
      [['spec.domain.cpu', 'FieldValueInvalid']],
    ],
    [
      'a machine type QEMU cannot have (found by vmm)',
      (v) => (v.spec.domain.machine = { type: 'Q35 please' }),
      [['spec.domain.machine.type', 'FieldValueInvalid']],
    ],
    [
      'a hostDisk of type Disk with a capacity, one DiskOrCreate without, one of an unknown type',
      (v) => {
        v.spec.volumes![1] = { name: 'emptydisk', hostDisk: { path: '/srv/a.img', type: 'Disk', capacity: '1Gi' } };
        v.spec.volumes!.push(
          { name: 'b', hostDisk: { path: '/srv/b.img', type: 'DiskOrCreate' } },
          { name: 'c', hostDisk: { path: 'c.img', type: 'File' } },
        );
        v.spec.domain.devices!.disks!.push({ name: 'b' }, { name: 'c' });
      },
      [
        ['spec.volumes[1].hostDisk.capacity', 'FieldValueInvalid'],
        ['spec.volumes[3].hostDisk.capacity', 'FieldValueRequired'],
        ['spec.volumes[4].hostDisk.path', 'FieldValueInvalid'],
        ['spec.volumes[4].hostDisk.type', 'FieldValueNotSupported'],
      ],
    ],
    [
      'a PVC not bound on this node',
      (v) => (v.spec.volumes![1] = { name: 'emptydisk', persistentVolumeClaim: { claimName: 'data' } }),
      [['spec.volumes[1].persistentVolumeClaim.claimName', 'FieldValueNotFound']],
    ],
    [
      'a kernel boot container with neither kernel nor initrd, and a relative path',
      (v) =>
        (v.spec.domain.firmware!.kernelBoot = {
          kernelArgs: 'quiet',
          container: { image: 'localhost/vkvm/test-guest-kernel:v1', initrdPath: 'boot/initrd' },
        }),
      [['spec.domain.firmware.kernelBoot.container.initrdPath', 'FieldValueInvalid']],
    ],
    [
      'kernel args without a kernel',
      (v) => (v.spec.domain.firmware!.kernelBoot = { kernelArgs: 'quiet' }),
      [['spec.domain.firmware.kernelBoot.kernelArgs', 'FieldValueInvalid']],
    ],
    [
      'a second cloud-init volume',
      (v) => {
        v.spec.volumes!.push({ name: 'more', cloudInitNoCloud: { userData: 'x' } });
        v.spec.domain.devices!.disks!.push({ name: 'more' });
      },
      [['spec.volumes[3]', 'FieldValueDuplicate']],
    ],
    ['an arm64 guest', (v) => (v.spec.architecture = 'arm64'), [['spec.architecture', 'FieldValueNotSupported']]],
    [
      'a time zone the host does not know',
      (v) => (v.spec.domain.clock = { timezone: 'Nowhere/Atlantis' }),
      [['spec.domain.clock.timezone', 'FieldValueInvalid']],
    ],
    [
      'an interface repeating a disk’s bootOrder',
      (v) => {
        v.spec.domain.devices!.disks![0]!.bootOrder = 1;
        v.spec.domain.devices!.interfaces![0]!.bootOrder = 1;
      },
      [['spec.domain.devices.interfaces[0].bootOrder', 'FieldValueDuplicate']],
    ],
  ];
  for (const [name, edit, want, context] of cases) t.same(causesOf(translateVmi(smokeWith(edit), context ?? ctx())), want, name);
});

t.test('all causes come back at once', async (t) => {
  const vmi = smokeWith((v) => {
    delete v.spec.domain.resources;
    v.spec.domain.devices!.disks![1]!.disk!.bus = 'ide';
    v.spec.domain.devices!.interfaces![0]!.macAddress = 'nope';
    delete v.metadata.uid;
  });
  const err = translateVmi(vmi, ctx());
  t.ok(err instanceof SpecError);
  t.same(
    (err as SpecError).causes.map((c) => c.path),
    [
      'metadata.uid',
      'spec.domain.resources.requests.memory',
      'spec.domain.devices.disks[1].disk.bus',
      'spec.domain.devices.interfaces[0].macAddress',
    ],
  );
});

t.test('fields outside the subset are listed, not errors, and the rest runs', async (t) => {
  const vmi = smokeWith((v) => {
    const d = v.spec.domain;
    d.cpu = { cores: 2, dedicatedCpuPlacement: false, features: [] } as never; // asking for nothing is not reported
    (d.devices as Record<string, unknown>).gpus = [{ name: 'gpu1', deviceName: 'nvidia.com/TU104GL' }];
    d.features = { smm: {} };
    d.clock = { utc: {}, timer: { hpet: { present: false } } } as never;
    (d.devices!.disks![1] as unknown as Record<string, unknown>).serial = 'data-1';
    v.spec.networks!.push({ name: 'storage', multus: { networkName: 'storage-net' } } as never);
    d.devices!.interfaces!.push({ name: 'storage', bridge: {} });
    // Not realized by the VM, but read by the drain (the eviction webhook): not listed.
    v.spec.evictionStrategy = 'LiveMigrate';
  });
  const result = ok(translateVmi(vmi, ctx()));
  t.same(result.unsupported, [
    'spec.domain.devices.disks[1].serial',
    'spec.domain.devices.gpus',
    'spec.domain.clock.timer',
    'spec.networks[1].multus',
    'spec.domain.features.smm',
  ]);
  t.same(
    {
      disks: result.spec.disks.map((d) => d.name),
      interfaces: result.spec.interfaces.map((i) => i.name),
      cpu: result.spec.cpu,
      clock: result.spec.clock,
    },
    {
      disks: ['containerdisk', 'emptydisk', 'cloudinitdisk'],
      interfaces: ['default'],
      cpu: { sockets: 1, cores: 2, threads: 1 },
      clock: { kind: 'utc' },
    },
    'the interface on the multus network is left out',
  );
});

t.test('a volume vkvm cannot provide is refused, naming its field; its disk is never dropped', async (t) => {
  const kinds: Array<[string, Record<string, unknown>]> = [
    ['ephemeral', { persistentVolumeClaim: { claimName: 'golden' } }],
    ['cloudInitConfigDrive', { userData: '#cloud-config\n' }],
    ['sysprep', { configMap: { name: 'unattend' } }],
    ['configMap', { name: 'app-config' }],
    ['secret', { secretName: 'app-secret' }],
    ['serviceAccount', { serviceAccountName: 'default' }],
    ['downwardAPI', { fields: [{ path: 'labels', fieldRef: { fieldPath: 'metadata.labels' } }] }],
    ['downwardMetrics', {}],
    ['memoryDump', { claimName: 'dump' }],
  ];
  const refusals = kinds.map(([kind, source]) =>
    causesOf(
      translateVmi(
        smokeWith((v) => {
          v.spec.domain.devices!.disks!.push({ name: 'extra', disk: { bus: 'virtio' } });
          v.spec.volumes!.push({ name: 'extra', [kind]: source } as never);
        }),
        ctx(),
      ),
    ),
  );
  t.same(
    refusals,
    kinds.map(([kind]) => [[`spec.volumes[3].${kind}`, 'FieldValueNotSupported']]),
    'each kind KubeVirt has beyond containerDisk, emptyDisk, cloudInitNoCloud, hostDisk, persistentVolumeClaim and dataVolume',
  );
  const ephemeral = translateVmi(
    smokeWith((v) => {
      v.spec.domain.devices!.disks!.push({ name: 'root', disk: { bus: 'virtio' } });
      v.spec.volumes!.push({ name: 'root', ephemeral: { persistentVolumeClaim: { claimName: 'golden' } } } as never);
    }),
    ctx(),
  );
  t.match(
    ephemeral,
    { causes: [{ message: /use a containerDisk, or the persistentVolumeClaim itself/ }] },
    'the message says what to use instead',
  );

  t.same(
    causesOf(
      translateVmi(
        smokeWith((v) => {
          v.spec.domain.devices!.disks![1] = { name: 'emptydisk', lun: {} } as never;
          v.spec.domain.devices!.filesystems = [{ name: 'shared' }];
          v.spec.volumes!.push({ name: 'shared', persistentVolumeClaim: { claimName: 'shared' } });
        }),
        ctx({ pvcs: { shared: { kind: 'hostPath', hostPath: '/mnt/shared', volumeMode: 'Filesystem' } } }),
      ),
    ),
    [
      ['spec.domain.devices.disks[1].lun', 'FieldValueNotSupported'],
      ['spec.domain.devices.filesystems[0]', 'FieldValueNotSupported'],
    ],
    'a LUN disk and a virtiofs filesystem are refused too (the filesystem’s volume is not also called diskless)',
  );

  const csi = {
    unservable: 'claim "data" is bound to PersistentVolume pvc-1, neither local, hostPath nor CSI: vkvm serves VM disks from those only',
  };
  t.match(
    translateVmi(
      smokeWith((v) => {
        v.spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
        v.spec.volumes!.push({ name: 'data', persistentVolumeClaim: { claimName: 'data' } });
      }),
      ctx({ pvcs: { data: csi } }),
    ),
    { causes: [{ path: 'spec.volumes[3].persistentVolumeClaim.claimName', reason: 'FieldValueNotSupported', message: csi.unservable }] },
    'a claim the node cannot serve is refused at its claimName, with the reason',
  );

  const published = '/var/lib/vkvm/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount/disk.img';
  const csiClaim = (readOnly: boolean) => ({
    kind: 'csi' as const,
    volume: {
      pvName: 'pv-1',
      driver: 'csi.vkvm.io',
      volumeHandle: 'vol-1',
      volumeAttributes: {},
      volumeMode: 'Filesystem' as const,
      accessMode: 'SINGLE_NODE_WRITER' as const,
      readOnly,
    },
    diskPath: published,
    volumeMode: 'Filesystem' as const,
    capacity: '48Mi',
  });
  const csiDisk = (readOnly: boolean) =>
    ok(
      translateVmi(
        smokeWith((v) => {
          v.spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
          v.spec.volumes!.push({ name: 'data', persistentVolumeClaim: { claimName: 'data' } });
        }),
        ctx({ pvcs: { data: csiClaim(readOnly) } }),
      ),
    ).spec.disks.at(-1);
  t.same(
    [csiDisk(false), csiDisk(true)],
    [
      {
        name: 'data',
        device: 'disk',
        bus: 'virtio',
        source: { kind: 'host', path: published, fromPersistentVolume: true, createSizeMiB: 48 },
      },
      {
        name: 'data',
        device: 'disk',
        bus: 'virtio',
        readOnly: true,
        source: { kind: 'host', path: published, fromPersistentVolume: true, createSizeMiB: 48 },
      },
    ],
    "a claim on a CSI PV: disk.img where the node publishes it, at the claim's capacity; a read-only PV makes a read-only disk",
  );

  const withDataVolume = (pvcs: Parameters<typeof ctx>[0]) =>
    translateVmi(
      smokeWith((v) => {
        v.spec.domain.devices!.disks!.push({ name: 'root', disk: { bus: 'virtio' } });
        v.spec.volumes!.push({ name: 'root', dataVolume: { name: 'fedora-root' } });
      }),
      ctx(pvcs),
    );
  t.same(
    ok(withDataVolume({ pvcs: { 'fedora-root': csiClaim(false) } })).spec.disks.at(-1),
    {
      name: 'root',
      device: 'disk',
      bus: 'virtio',
      source: { kind: 'host', path: published, fromPersistentVolume: true, createSizeMiB: 48 },
    },
    "a dataVolume volume is its DataVolume's claim, of the same name (KubeVirt's semantics)",
  );
  t.same(
    causesOf(withDataVolume({})),
    [['spec.volumes[3].dataVolume.name', 'FieldValueNotFound']],
    "a DataVolume whose claim the node cannot serve is refused at the dataVolume's name",
  );
  const device = '/var/lib/vkvm/pods/uid-1/volumeDevices/kubernetes.io~csi/pv-1';
  const blockClaim = { ...csiClaim(false), volume: { ...csiClaim(false).volume, volumeMode: 'Block' as const }, diskPath: device };
  t.same(
    ok(
      translateVmi(
        smokeWith((v) => {
          v.spec.domain.devices!.disks!.push({ name: 'data', disk: { bus: 'virtio' } });
          v.spec.volumes!.push({ name: 'data', persistentVolumeClaim: { claimName: 'data' } });
        }),
        ctx({ pvcs: { data: { ...blockClaim, volumeMode: 'Block' } } }),
      ),
    ).spec.disks.at(-1),
    {
      name: 'data',
      device: 'disk',
      bus: 'virtio',
      source: { kind: 'host', path: device, fromPersistentVolume: true, ownDeviceNode: true },
    },
    'a CSI claim in Block mode: the device the node publishes for the pod, a node of its own in the VM view, never created',
  );
});

t.test('compute: topology, vCPUs from resources, CPU cap, memory precedence, CPU model', async (t) => {
  const compute = (domain: Partial<VirtualMachineInstance['spec']['domain']>) => {
    const { spec } = ok(
      translateVmi(
        smokeWith((v) => Object.assign(v.spec.domain, { cpu: undefined, ...domain })),
        ctx(),
      ),
    );
    return { cpu: spec.cpu, memoryMiB: spec.memoryMiB };
  };
  t.same(
    compute({ resources: { limits: { cpu: '1500m', memory: '1Gi' } } }),
    { cpu: { sockets: 2, cores: 1, threads: 1, limitMillicores: 1500 }, memoryMiB: 1024 },
    'limits alone: vCPUs are sockets',
  );
  t.same(
    compute({ resources: { requests: { cpu: 3, memory: '2Gi' }, limits: { memory: '4Gi' } } }),
    { cpu: { sockets: 3, cores: 1, threads: 1 }, memoryMiB: 2048 },
    'requests before limits for memory',
  );
  t.same(
    compute({
      cpu: { sockets: 2, threads: 2, model: 'host-passthrough' },
      memory: { guest: '768Mi' },
      resources: { requests: { memory: '1Gi' } },
    }),
    { cpu: { sockets: 2, cores: 1, threads: 2, model: 'host-passthrough' }, memoryMiB: 768 },
    'memory.guest first; unset counts are 1',
  );
  t.same(
    compute({ cpu: { cores: 1, model: 'Skylake-Client-IBRS' } }).cpu,
    { sockets: 1, cores: 1, threads: 1, model: { named: 'Skylake-Client-IBRS' } },
    'a named model',
  );
});

t.test('firmware: EFI with SMM, EFI without secure boot, kernel boot from the test guest image or a host directory', async (t) => {
  const fw = (domain: Partial<VirtualMachineInstance['spec']['domain']>, context = ctx()) => {
    const r = ok(
      translateVmi(
        smokeWith((v) => Object.assign(v.spec.domain, domain)),
        context,
      ),
    );
    return { firmware: r.spec.firmware, kernelBoot: r.spec.kernelBoot, unsupported: r.unsupported };
  };
  t.same(fw({ firmware: { bootloader: { efi: {} } }, features: { smm: {} } }), {
    firmware: { kind: 'efi', secureBoot: true },
    kernelBoot: undefined,
    unsupported: [],
  });
  t.same(fw({ firmware: { bootloader: { efi: { secureBoot: false } } } }), {
    firmware: { kind: 'efi', secureBoot: false },
    kernelBoot: undefined,
    unsupported: [],
  });
  t.same(fw({ firmware: { bootloader: { bios: { useSerial: true } } } }), {
    firmware: { kind: 'bios', useSerial: true },
    kernelBoot: undefined,
    unsupported: [],
  });
  t.same(
    fw({ firmware: { bootloader: { bios: { useSerial: false } } } }).firmware,
    { kind: 'bios' },
    'bios.useSerial false is the default',
  );
  t.same(
    fw({
      firmware: {
        kernelBoot: {
          kernelArgs: 'console=ttyS0',
          container: { image: 'localhost/vkvm/test-guest-kernel:v1', kernelPath: '/boot/vmlinuz', initrdPath: '/boot/initrd.img' },
        },
      },
    }),
    {
      firmware: { kind: 'bios' },
      kernelBoot: {
        kernelPath: '/boot/vmlinuz',
        initrdPath: '/boot/initrd.img',
        cmdline: 'console=ttyS0',
        container: { image: 'localhost/vkvm/test-guest-kernel:v1', pullPolicy: 'IfNotPresent' },
      },
      unsupported: [],
    },
    'a tag other than latest: IfNotPresent, so the node takes it from its store',
  );
  t.same(
    fw({
      firmware: {
        kernelBoot: {
          kernelArgs: 'console=ttyS0',
          container: { image: 'file:///srv/kernels/fedora', kernelPath: '/boot/vmlinuz', initrdPath: '/boot/initrd' },
        },
      },
    }),
    {
      firmware: { kind: 'bios' },
      kernelBoot: {
        kernelPath: '/srv/kernels/fedora/boot/vmlinuz',
        initrdPath: '/srv/kernels/fedora/boot/initrd',
        cmdline: 'console=ttyS0',
      },
      unsupported: [],
    },
  );
  t.equal(
    ok(
      translateVmi(
        smokeWith((v) => (v.spec.domain.features = { acpi: { enabled: false } })),
        ctx(),
      ),
    ).spec.acpi,
    false,
    'ACPI off when disabled',
  );
});

t.test("firmware.uuid is the guest's SMBIOS system UUID, else the VMI uid; one that is no UUID is named", async (t) => {
  const systemUuid = (edit: (v: VirtualMachineInstance) => void) => {
    const r = translateVmi(smokeWith(edit), ctx());
    return r instanceof SpecError ? causesOf(r) : r.spec.systemUuid;
  };
  t.same(
    [
      systemUuid(() => {}),
      systemUuid((v) => delete v.spec.domain.firmware),
      systemUuid((v) => (v.spec.domain.firmware = { uuid: 'not-a-uuid' })),
    ],
    [FIRMWARE_UUID, VMI_UID, [['spec.domain.firmware.uuid', 'FieldValueInvalid']]],
  );
});

t.test('storage: host disks, PVCs, CD-ROM defaults, boot order, read-only', async (t) => {
  const vmi = smokeWith((v) => {
    v.spec.domain.devices!.disks = [
      { name: 'root', bootOrder: 1 },
      { name: 'data', disk: { bus: 'scsi' } },
      { name: 'dev', disk: { readonly: true } },
      { name: 'iso', cdrom: {}, bootOrder: 2 },
      { name: 'scratch' },
      { name: 'cloudinitdisk', cdrom: { bus: 'sata' } },
    ];
    v.spec.volumes = [
      { name: 'root', persistentVolumeClaim: { claimName: 'root-pvc' } },
      { name: 'data', hostDisk: { path: '/srv/vms/data.img', type: 'DiskOrCreate', capacity: '10Gi' } },
      { name: 'dev', persistentVolumeClaim: { claimName: 'raw-pvc', readOnly: true } },
      { name: 'iso', hostDisk: { path: '/srv/isos/install.iso', type: 'Disk' } },
      { name: 'scratch', containerDisk: { image: 'https://images.example/scratch.qcow2' } },
      { name: 'cloudinitdisk', cloudInitNoCloud: { secretRef: { name: 'init' }, networkDataSecretRef: { name: 'net' } } },
    ];
  });
  const result = ok(
    translateVmi(
      vmi,
      ctx({
        pvcs: {
          'root-pvc': { kind: 'hostPath', hostPath: '/mnt/local-pv/pv-1', volumeMode: 'Filesystem', capacity: '20Gi' },
          'raw-pvc': { kind: 'hostPath', hostPath: '/dev/vg0/raw', volumeMode: 'Block' },
        },
        secrets: { init: { userData: '#cloud-config\n' }, net: { networkdata: 'version: 2\n' } },
      }),
    ),
  );
  t.same(result.spec.disks, [
    {
      name: 'root',
      device: 'disk',
      bus: 'virtio',
      bootOrder: 1,
      source: { kind: 'host', path: '/mnt/local-pv/pv-1/disk.img', fromPersistentVolume: true, createSizeMiB: 20480 },
    },
    { name: 'data', device: 'disk', bus: 'scsi', source: { kind: 'host', path: '/srv/vms/data.img', createSizeMiB: 10240 } },
    {
      name: 'dev',
      device: 'disk',
      bus: 'virtio',
      readOnly: true,
      source: { kind: 'host', path: '/dev/vg0/raw', fromPersistentVolume: true },
    },
    { name: 'iso', device: 'cdrom', bus: 'sata', readOnly: true, bootOrder: 2, source: { kind: 'host', path: '/srv/isos/install.iso' } },
    { name: 'scratch', device: 'disk', bus: 'virtio', source: { kind: 'url', url: 'https://images.example/scratch.qcow2' } },
    {
      name: 'cloudinitdisk',
      device: 'cdrom',
      bus: 'sata',
      readOnly: true,
      source: {
        kind: 'cloudInit',
        userData: '#cloud-config\n',
        networkConfig: 'version: 2\n',
        metaData: `{"instance-id":"${FIRMWARE_UUID}","local-hostname":"testvm"}`,
      },
    },
  ]);
});

t.test('network: the default pod interface, MAC forms, ports, models', async (t) => {
  const net = (edit: (v: VirtualMachineInstance) => void, context = ctx()) => {
    const r = ok(translateVmi(smokeWith(edit), context));
    return { interfaces: r.spec.interfaces };
  };
  const none = (v: VirtualMachineInstance) => {
    delete v.spec.domain.devices!.interfaces;
    delete v.spec.networks;
  };
  t.same(
    net(none).interfaces,
    [{ name: 'default', binding: 'bridge', mac: '52:54:00:05:c0:8b' }],
    "no interfaces: KubeVirt's default, a bridge on the pod network",
  );
  t.same(
    net(none, ctx({ defaultInterfaceBinding: 'masquerade' })).interfaces[0]!.binding,
    'masquerade',
    'the cluster default binding applies',
  );
  t.same(
    net((v) => (none(v), (v.spec.domain.devices!.autoattachPodInterface = false))).interfaces,
    [],
    'autoattachPodInterface: false means no NIC',
  );
  t.same(
    net((v) =>
      Object.assign(v.spec.domain.devices!.interfaces![0]!, {
        macAddress: 'DE-AD-00-00-BE-AF',
        model: 'e1000',
        ports: [
          { name: 'http', port: 80 },
          { port: 53, protocol: 'UDP' },
        ],
      }),
    ),
    {
      interfaces: [
        {
          name: 'default',
          binding: 'masquerade',
          mac: 'de:ad:00:00:be:af',
          forwardPorts: [
            { name: 'http', protocol: 'TCP', port: 80 },
            { protocol: 'UDP', port: 53 },
          ],
          model: 'e1000',
        },
      ],
    },
  );
  const restarted = ok(translateVmi(vmiOf(parse(SMOKE_VM) as VirtualMachine, '11111111-2222-4333-8444-555555555555'), ctx()));
  t.equal(
    restarted.spec.interfaces[0]!.mac,
    '52:54:00:05:c0:8b',
    'the derived MAC survives a restart (it follows the firmware UUID, not the VMI uid)',
  );
});

t.test('cloud-init meta-data falls back to the VMI uid and uses spec.hostname', async (t) => {
  const vmi = smokeWith((v) => {
    delete v.spec.domain.firmware;
    v.spec.hostname = 'web-1';
  });
  const disk = ok(translateVmi(vmi, ctx())).spec.disks.find((d) => d.name === 'cloudinitdisk')!;
  t.same(disk.source, { kind: 'cloudInit', userData: 'Hi.\\n', metaData: `{"instance-id":"${VMI_UID}","local-hostname":"web-1"}` });
});

t.test('vmiReferences lists what the caller resolves first', async (t) => {
  const vmi = smokeWith((v) => {
    v.spec.volumes!.push(
      { name: 'a', persistentVolumeClaim: { claimName: 'data' } },
      { name: 'b', cloudInitNoCloud: { secretRef: { name: 'init' }, networkDataSecretRef: { name: 'init' } } },
    );
  });
  t.same(vmiReferences(vmi), { secrets: ['init'], claims: ['data'] });
});

t.test('clock and interface boot order reach the VmSpec', async (t) => {
  const spec = (edit: (v: VirtualMachineInstance) => void) => ok(translateVmi(smokeWith(edit), ctx())).spec;
  t.same(
    spec((v) => (v.spec.domain.clock = { utc: { offsetSeconds: 3600 } })).clock,
    { kind: 'utc', offsetSeconds: 3600 },
    'UTC with an offset',
  );
  t.same(
    spec((v) => (v.spec.domain.clock = { timezone: 'Europe/Paris' })).clock,
    { kind: 'timezone', timezone: 'Europe/Paris' },
    'a named time zone',
  );
  const pxe = spec((v) => (v.spec.domain.devices!.interfaces![0]!.bootOrder = 2));
  t.same(pxe.interfaces[0]?.bootOrder, 2, "the interface's boot order");
});

t.test("a disk's cache and io reach the VmSpec; the node's refusal of them names the VMI field", async (t) => {
  const r = ok(
    translateVmi(
      smokeWith((v) => Object.assign(v.spec.domain.devices!.disks![0]!, { cache: 'none', io: 'native' })),
      ctx(),
    ),
  );
  t.same(
    {
      modes: r.spec.disks.map((disk) => [disk.cache, disk.io]),
      causes: r.atKubevirtFields([{ path: 'disks[0].cache', reason: 'FieldValueInvalid', message: 'cache none needs O_DIRECT' }]),
    },
    {
      modes: [
        ['none', 'native'],
        [undefined, undefined],
        [undefined, undefined],
      ],
      causes: [{ path: 'spec.domain.devices.disks[0].cache', reason: 'FieldValueInvalid', message: 'cache none needs O_DIRECT' }],
    },
  );
});

t.test('causes found later, when the node prepares disks, name the VMI field', async (t) => {
  const r = ok(
    translateVmi(
      smokeWith((v) => (v.spec.volumes![0]!.containerDisk!.image = '/srv/missing.qcow2')),
      ctx(),
    ),
  );
  t.same(
    r.atKubevirtFields([
      { path: 'disks[0].source.path', reason: 'FieldValueNotFound', message: '/srv/missing.qcow2 does not exist on this node' },
    ]),
    [
      {
        path: 'spec.volumes[0].containerDisk.image',
        reason: 'FieldValueNotFound',
        message: '/srv/missing.qcow2 does not exist on this node',
      },
    ],
  );
});

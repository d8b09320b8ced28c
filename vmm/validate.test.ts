import t from 'tap';
import { validateVmSpec } from './validate.js';
import { testSpec } from './testing/specs.js';
import type { DiskSpec, InterfaceSpec, VmSpec } from './spec.js';

const disk = (name: string, over: Partial<DiskSpec> = {}): DiskSpec => ({
  name,
  device: 'disk',
  bus: 'virtio',
  source: { kind: 'empty', sizeMiB: 64 },
  ...over,
});
const nic = (name: string, mac: string, over: Partial<InterfaceSpec> = {}): InterfaceSpec => ({
  name,
  binding: 'masquerade',
  mac,
  ...over,
});
const cpu = (over: Partial<VmSpec['cpu']>): VmSpec['cpu'] => ({ sockets: 1, cores: 1, threads: 1, ...over });

t.test('a valid spec has no causes', async (t) => {
  const spec = testSpec({
    kernelBoot: { kernelPath: '/k/vmlinuz', initrdPath: '/k/initrd' },
    disks: [
      disk('root', { source: { kind: 'url', url: 'https://images.example/a.qcow2' }, bootOrder: 1 }),
      disk('seed', { device: 'cdrom', bus: 'sata', source: { kind: 'cloudInit', userData: '', metaData: '' } }),
      disk('data', { bus: 'scsi', source: { kind: 'host', path: '/dev/vg0/data' }, bootOrder: 2 }),
      disk('fast', { ioThread: 2, queues: 4 }),
    ],
    ioThreads: 2,
    interfaces: [nic('default', '52:54:00:12:34:56', { tapDevice: 'vk0b6a3c1e' })],
  });
  t.equal(validateVmSpec(spec), null);
});

const cases: { name: string; spec: Partial<VmSpec>; causes: { path: string; reason: string; message?: string }[] }[] = [
  { name: 'unknown version', spec: { version: 2 as never }, causes: [{ path: 'version', reason: 'FieldValueNotSupported' }] },
  { name: 'uid that is not a UUID', spec: { uid: 'pod-1' }, causes: [{ path: 'uid', reason: 'FieldValueInvalid' }] },
  { name: 'system UUID that is not a UUID', spec: { systemUuid: 'vm-1' }, causes: [{ path: 'systemUuid', reason: 'FieldValueInvalid' }] },
  { name: 'empty name', spec: { name: '' }, causes: [{ path: 'name', reason: 'FieldValueRequired' }] },
  { name: 'name with a slash', spec: { name: 'ns/vm' }, causes: [{ path: 'name', reason: 'FieldValueInvalid' }] },
  { name: 'odd machine type', spec: { machineType: 'Q35 please' }, causes: [{ path: 'machineType', reason: 'FieldValueInvalid' }] },
  { name: '0 cores', spec: { cpu: cpu({ cores: 0 }) }, causes: [{ path: 'cpu.cores', reason: 'FieldValueInvalid' }] },
  {
    name: 'fractional sockets and negative threads',
    spec: { cpu: cpu({ sockets: 1.5, threads: -1 }) },
    causes: [
      { path: 'cpu.sockets', reason: 'FieldValueInvalid' },
      { path: 'cpu.threads', reason: 'FieldValueInvalid' },
    ],
  },
  { name: 'too many vCPUs', spec: { cpu: cpu({ sockets: 2, cores: 128 }) }, causes: [{ path: 'cpu', reason: 'FieldValueInvalid' }] },
  {
    name: 'named CPU model without a name',
    spec: { cpu: cpu({ model: { named: '' } }) },
    causes: [{ path: 'cpu.model.named', reason: 'FieldValueRequired' }],
  },
  {
    name: 'unknown CPU mode',
    spec: { cpu: cpu({ model: 'maximum' as never }) },
    causes: [{ path: 'cpu.model', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'zero CPU limit',
    spec: { cpu: cpu({ limitMillicores: 0 }) },
    causes: [{ path: 'cpu.limitMillicores', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'negative or fractional CPU request',
    spec: { cpu: cpu({ requestMillicores: -1 }) },
    causes: [{ path: 'cpu.requestMillicores', reason: 'FieldValueInvalid' }],
  },
  { name: 'memory below 32 MiB', spec: { memoryMiB: 16 }, causes: [{ path: 'memoryMiB', reason: 'FieldValueInvalid' }] },
  { name: 'fractional memory', spec: { memoryMiB: 64.5 }, causes: [{ path: 'memoryMiB', reason: 'FieldValueInvalid' }] },
  {
    name: 'unknown firmware',
    spec: { firmware: { kind: 'uboot' } as never },
    causes: [{ path: 'firmware.kind', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'secure boot on an i440fx machine',
    spec: { machineType: 'pc-i440fx-7.2', firmware: { kind: 'efi', secureBoot: true } },
    causes: [{ path: 'firmware.secureBoot', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'kernel boot without a kernel',
    spec: { kernelBoot: { kernelPath: '' } },
    causes: [{ path: 'kernelBoot.kernelPath', reason: 'FieldValueRequired' }],
  },
  {
    name: 'kernel boot with relative paths',
    spec: { kernelBoot: { kernelPath: 'vmlinuz', initrdPath: 'initrd' } },
    causes: [
      { path: 'kernelBoot.kernelPath', reason: 'FieldValueInvalid' },
      { path: 'kernelBoot.initrdPath', reason: 'FieldValueInvalid' },
    ],
  },
  {
    name: 'unknown bus',
    spec: { disks: [disk('a'), disk('b', { bus: 'ide' as never })] },
    causes: [{ path: 'disks[1].bus', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'unknown cache and io modes',
    spec: { disks: [disk('a', { cache: 'unsafe' as never, io: 'io_uring' as never })] },
    causes: [
      { path: 'disks[0].cache', reason: 'FieldValueNotSupported' },
      { path: 'disks[0].io', reason: 'FieldValueNotSupported' },
    ],
  },
  {
    name: 'io native with a host cache',
    spec: { disks: [disk('a', { cache: 'writeback', io: 'native' })] },
    causes: [{ path: 'disks[0].io', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'iothreads: a count that is no positive integer, and a disk naming a thread the VM lacks',
    spec: { ioThreads: 0, disks: [disk('a', { ioThread: 1 })] },
    causes: [
      { path: 'ioThreads', reason: 'FieldValueInvalid' },
      { path: 'disks[0].ioThread', reason: 'FieldValueInvalid', message: "1 is not one of the VM's iothreads (1..0)" },
    ],
  },
  {
    name: 'iothreads and queues only on virtio disks, queues in range',
    spec: {
      ioThreads: 2,
      disks: [disk('a', { ioThread: 3, queues: 1025 }), disk('b', { bus: 'sata', ioThread: 1, queues: 2 })],
    },
    causes: [
      { path: 'disks[0].ioThread', reason: 'FieldValueInvalid' },
      { path: 'disks[0].queues', reason: 'FieldValueInvalid' },
      { path: 'disks[1].ioThread', reason: 'FieldValueInvalid', message: 'an iothread needs bus virtio, not "sata"' },
      { path: 'disks[1].queues', reason: 'FieldValueInvalid' },
    ],
  },
  {
    name: 'virtio cdrom',
    spec: { disks: [disk('a', { device: 'cdrom', source: { kind: 'host', path: '/i.iso' } })] },
    causes: [{ path: 'disks[0].bus', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'unknown device',
    spec: { disks: [disk('a', { device: 'floppy' as never })] },
    causes: [{ path: 'disks[0].device', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'duplicate disk names',
    spec: { disks: [disk('a'), disk('b'), disk('a')] },
    causes: [{ path: 'disks[2].name', reason: 'FieldValueDuplicate' }],
  },
  {
    name: 'disk name unsafe as a file name',
    spec: { disks: [disk('../etc')] },
    causes: [{ path: 'disks[0].name', reason: 'FieldValueInvalid' }],
  },
  { name: 'empty disk name', spec: { disks: [disk('')] }, causes: [{ path: 'disks[0].name', reason: 'FieldValueRequired' }] },
  {
    name: 'duplicate bootOrder',
    spec: { disks: [disk('a', { bootOrder: 1 }), disk('b', { bootOrder: 1 })] },
    causes: [{ path: 'disks[1].bootOrder', reason: 'FieldValueDuplicate' }],
  },
  {
    name: 'zero bootOrder',
    spec: { disks: [disk('a', { bootOrder: 0 })] },
    causes: [{ path: 'disks[0].bootOrder', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'an interface repeating a disk’s bootOrder',
    spec: { disks: [disk('a', { bootOrder: 1 })], interfaces: [{ ...nic('n', '52:54:00:00:00:01'), bootOrder: 1 }] },
    causes: [{ path: 'interfaces[0].bootOrder', reason: 'FieldValueDuplicate', message: '1 is also the boot order of disks[0]' }],
  },
  {
    name: 'unknown time zone',
    spec: { clock: { kind: 'timezone', timezone: 'Mars/Olympus_Mons' } },
    causes: [{ path: 'clock.timezone', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'fractional clock offset',
    spec: { clock: { kind: 'utc', offsetSeconds: 1.5 } },
    causes: [{ path: 'clock.offsetSeconds', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'relative image path',
    spec: { disks: [disk('a', { source: { kind: 'image', path: 'a.qcow2' } })] },
    causes: [{ path: 'disks[0].source.path', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'missing host path',
    spec: { disks: [disk('a', { source: { kind: 'host', path: '' } })] },
    causes: [{ path: 'disks[0].source.path', reason: 'FieldValueRequired' }],
  },
  {
    name: 'ftp URL',
    spec: { disks: [disk('a', { source: { kind: 'url', url: 'ftp://h/a.img' } })] },
    causes: [{ path: 'disks[0].source.url', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'unparsable URL',
    spec: { disks: [disk('a', { source: { kind: 'url', url: 'not a url' } })] },
    causes: [{ path: 'disks[0].source.url', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'empty disk of 0 MiB',
    spec: { disks: [disk('a', { source: { kind: 'empty', sizeMiB: 0 } })] },
    causes: [{ path: 'disks[0].source.sizeMiB', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'empty cdrom',
    spec: { disks: [disk('a', { device: 'cdrom', bus: 'sata' })] },
    causes: [{ path: 'disks[0].device', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'cloud-init without meta-data',
    spec: { disks: [disk('a', { source: { kind: 'cloudInit', userData: '' } as never })] },
    causes: [{ path: 'disks[0].source.metaData', reason: 'FieldValueRequired' }],
  },
  {
    name: 'unknown source kind',
    spec: { disks: [disk('a', { source: { kind: 'nfs' } as never })] },
    causes: [{ path: 'disks[0].source.kind', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'invalid MAC',
    spec: { interfaces: [nic('a', '52:54:00:12:34')] },
    causes: [{ path: 'interfaces[0].mac', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'upper-case MAC',
    spec: { interfaces: [nic('a', '52:54:00:AB:CD:EF')] },
    causes: [{ path: 'interfaces[0].mac', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'multicast MAC',
    spec: { interfaces: [nic('a', '01:00:5e:00:00:01')] },
    causes: [{ path: 'interfaces[0].mac', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'broadcast MAC',
    spec: { interfaces: [nic('a', 'ff:ff:ff:ff:ff:ff')] },
    causes: [{ path: 'interfaces[0].mac', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'all-zero MAC',
    spec: { interfaces: [nic('a', '00:00:00:00:00:00')] },
    causes: [{ path: 'interfaces[0].mac', reason: 'FieldValueInvalid' }],
  },
  {
    name: 'duplicate MAC and interface name',
    spec: { interfaces: [nic('a', '52:54:00:00:00:01'), nic('a', '52:54:00:00:00:01')] },
    causes: [
      { path: 'interfaces[1].name', reason: 'FieldValueDuplicate' },
      { path: 'interfaces[1].mac', reason: 'FieldValueDuplicate' },
    ],
  },
  {
    name: 'unknown binding',
    spec: { interfaces: [nic('a', '52:54:00:00:00:01', { binding: 'sriov' as never })] },
    causes: [{ path: 'interfaces[0].binding', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'unknown NIC model',
    spec: { interfaces: [nic('a', '52:54:00:00:00:01', { model: 'rtl8139' as never })] },
    causes: [{ path: 'interfaces[0].model', reason: 'FieldValueNotSupported' }],
  },
  {
    name: 'tap name too long',
    spec: { interfaces: [nic('a', '52:54:00:00:00:01', { tapDevice: 'vk-0123456789abcdef' })] },
    causes: [{ path: 'interfaces[0].tapDevice', reason: 'FieldValueInvalid' }],
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const err = validateVmSpec(testSpec(c.spec));
    t.same(
      err?.causes.map(({ path, reason, message }, i) => ({ path, reason, ...(c.causes[i]?.message ? { message } : {}) })),
      c.causes,
    );
  });
}

t.test('every cause is reported at once, in a SpecError that names them all', async (t) => {
  const err = validateVmSpec(
    testSpec({
      cpu: cpu({ cores: 0 }),
      memoryMiB: 8,
      kernelBoot: { kernelPath: '' },
      disks: [disk('a', { bus: 'usb' as never }), disk('a', { bootOrder: 1 }), disk('c', { bootOrder: 1 })],
      interfaces: [nic('n', 'zz:zz')],
    }),
  );
  t.match(err, {
    kind: 'SpecError',
    message: /^invalid VM spec: cpu\.cores: must be a positive integer, got 0; memoryMiB: .*32 MiB/,
    causes: [
      { path: 'cpu.cores', reason: 'FieldValueInvalid', message: 'must be a positive integer, got 0' },
      { path: 'memoryMiB', reason: 'FieldValueInvalid' },
      { path: 'kernelBoot.kernelPath', reason: 'FieldValueRequired' },
      { path: 'disks[0].bus', reason: 'FieldValueNotSupported' },
      { path: 'disks[1].name', reason: 'FieldValueDuplicate' },
      { path: 'interfaces[0].mac', reason: 'FieldValueInvalid' },
      { path: 'disks[2].bootOrder', reason: 'FieldValueDuplicate' },
    ],
  });
  t.equal(err?.causes.length, 7, 'no cause more, none less');
});

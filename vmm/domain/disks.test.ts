import t from 'tap';
import { configureDisks, driveSuffix } from './disks.js';
import { applyBuilder, testRuntime, testSpec, TCG_HOST } from '../testing/specs.js';
import type { DiskSpec } from '../spec.js';
import type { PreparedDisk } from './runtime.js';

t.test('drive suffixes follow libvirt: a..z, aa..az, ba', async (t) => {
  t.same([0, 1, 25, 26, 51, 52, 701, 702].map(driveSuffix), ['a', 'b', 'z', 'aa', 'az', 'ba', 'zz', 'aaa']);
});

const qcow2 = (path: string): PreparedDisk => ({ path, format: 'qcow2', modes: { cache: 'none' } });
const disk = (name: string, over: Partial<DiskSpec> = {}): DiskSpec => ({
  name,
  device: 'disk',
  bus: 'virtio',
  source: { kind: 'empty', sizeMiB: 64 },
  ...over,
});

const cases: { name: string; disks: DiskSpec[]; prepared: Record<string, PreparedDisk>; want: object }[] = [
  {
    name: 'a virtio qcow2 disk discards through to the overlay',
    disks: [disk('root')],
    prepared: { root: qcow2('/v/root.qcow2') },
    want: {
      disk: [
        {
          $: { type: 'file', device: 'disk' },
          driver: { $: { name: 'qemu', type: 'qcow2', cache: 'none', discard: 'unmap' } },
          source: { $: { file: '/v/root.qcow2' } },
          target: { $: { dev: 'vda', bus: 'virtio' } },
          alias: { $: { name: 'ua-disk-root' } },
        },
      ],
      controller: [],
    },
  },
  {
    name: 'a virtio disk names its iothread and its queues in its driver',
    disks: [disk('data', { ioThread: 2, queues: 4 })],
    prepared: { data: qcow2('/v/data.qcow2') },
    want: {
      disk: [
        {
          $: { type: 'file', device: 'disk' },
          driver: { $: { name: 'qemu', type: 'qcow2', cache: 'none', discard: 'unmap', iothread: 2, queues: 4 } },
          source: { $: { file: '/v/data.qcow2' } },
          target: { $: { dev: 'vda', bus: 'virtio' } },
          alias: { $: { name: 'ua-disk-data' } },
        },
      ],
      controller: [],
    },
  },
  {
    name: 'a cdrom is read-only and has no discard; its cache mode is the one chosen on the node',
    disks: [disk('seed', { device: 'cdrom', bus: 'sata' })],
    prepared: { seed: { path: '/v/seed.iso', format: 'raw', modes: { cache: 'writethrough' } } },
    want: {
      disk: [
        {
          $: { type: 'file', device: 'cdrom' },
          driver: { $: { name: 'qemu', type: 'raw', cache: 'writethrough' } },
          source: { $: { file: '/v/seed.iso' } },
          target: { $: { dev: 'sda', bus: 'sata' } },
          readonly: {},
          alias: { $: { name: 'ua-disk-seed' } },
        },
      ],
      controller: [],
    },
  },
  {
    name: 'a read-only block device with a boot order, cache none and native AIO',
    disks: [disk('data', { readOnly: true, bootOrder: 2 })],
    prepared: { data: { path: '/dev/vg0/data', format: 'raw', block: true, modes: { cache: 'none', io: 'native' } } },
    want: {
      disk: [
        {
          $: { type: 'block', device: 'disk' },
          driver: { $: { name: 'qemu', type: 'raw', cache: 'none', io: 'native', discard: 'unmap' } },
          source: { $: { dev: '/dev/vg0/data' } },
          target: { $: { dev: 'vda', bus: 'virtio' } },
          readonly: {},
          boot: { $: { order: 2 } },
          alias: { $: { name: 'ua-disk-data' } },
        },
      ],
      controller: [],
    },
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    const draft = applyBuilder(configureDisks, testSpec({ disks: c.disks }), TCG_HOST, testRuntime({ disks: c.prepared }));
    t.same({ disk: draft.devices.disk, controller: draft.devices.controller }, c.want);
  });
}

t.test('SATA and SCSI share sd names, virtio counts apart, and SCSI brings a virtio-scsi controller', async (t) => {
  const disks = [disk('a', { bus: 'sata' }), disk('b', { bus: 'virtio' }), disk('c', { bus: 'scsi' }), disk('d', { bus: 'virtio' })];
  const prepared = Object.fromEntries(disks.map((d) => [d.name, qcow2(`/v/${d.name}`)]));
  const draft = applyBuilder(configureDisks, testSpec({ disks }), TCG_HOST, testRuntime({ disks: prepared }));
  t.same(
    { targets: draft.devices.disk.map((d) => d.target.$), controller: draft.devices.controller },
    {
      targets: [
        { dev: 'sda', bus: 'sata' },
        { dev: 'vda', bus: 'virtio' },
        { dev: 'sdb', bus: 'scsi' },
        { dev: 'vdb', bus: 'virtio' },
      ],
      controller: [{ $: { type: 'scsi', index: 0, model: 'virtio-scsi' } }],
    },
  );
});

t.test('a disk missing from the runtime is a launcher bug, not silently skipped', async (t) => {
  t.throws(() => applyBuilder(configureDisks, testSpec({ disks: [disk('root')] })), { kind: 'RuntimeMismatchError', message: /root/ });
});

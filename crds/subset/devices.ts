// spec.domain.devices of a VMI: disks (each backed by the volume of its name,
// volumes.ts) and interfaces (each on the network of its name, networks.ts).
import { PRESERVED, name, uniqueNames } from './common.js';
import { CDROM_BUSES, DISK_BUSES, DISK_CACHES, DISK_IOS, MAX_DEVICES } from './constants.js';
import { boolean, enumOf, integer, list, notInCrd, object, opaque, open, required, string, unsupported } from './field.js';

const bootOrder = (what: string) => integer(`Boot priority of this ${what}, 1 first. Unique across disks and interfaces.`, { minimum: 1 });
const bus = open(enumOf(DISK_BUSES, 'Bus to emulate. vkvm supports virtio, sata and scsi.'));
const cdromBus = open(enumOf(CDROM_BUSES, 'Bus to emulate. vkvm supports sata and scsi for CD-ROMs.'));

export const disk = object(
  {
    /** Also the name of the volume that backs the disk. */
    name: name('disk; a volume of the same name backs it'),
    /** Exactly one of disk, cdrom (or lun, which vkvm does not support); none means disk. */
    disk: object({ bus, readonly: boolean() }, { description: 'Attach as a disk.', preserveUnknown: true }),
    cdrom: object(
      {
        bus: cdromBus,
        /** Defaults to true. */
        readonly: boolean(),
        tray: notInCrd(enumOf(['open', 'closed'])),
      },
      { description: 'Attach as a CD-ROM.', preserveUnknown: true },
    ),
    /** 1 boots first; unique across disks and interfaces. */
    bootOrder: bootOrder('disk'),
    /** Absent: none where the node's file system takes O_DIRECT, else writethrough (as KubeVirt). */
    cache: open(
      enumOf(DISK_CACHES, "The disk's host cache mode. Default: none where the node's file system supports O_DIRECT, else writethrough."),
    ),
    /** Absent: native with cache none on a block device or a fully allocated file (as KubeVirt). */
    io: open(enumOf(DISK_IOS, "The disk's asynchronous I/O: native (Linux AIO, needs cache none) or threads.")),
    /** A virtio disk's own QEMU iothread, beside any pool of ioThreadsPolicy. */
    dedicatedIOThread: boolean('Run this virtio disk on a QEMU iothread of its own.'),
  },
  { preserveUnknown: true, description: PRESERVED },
);

export const iface = object(
  {
    /** Also the name of the network the interface connects to. */
    name: name('interface; a network of the same name connects it'),
    /** virtio (default) or e1000 in vkvm. */
    model: notInCrd(string()),
    /** Binding: exactly one of masquerade or bridge (KubeVirt's default) in vkvm. */
    masquerade: opaque('Connect through NAT on the pod network.'),
    bridge: opaque('Connect through a bridge.'),
    /** Ports forwarded to the guest with masquerade; none listed forwards all. */
    ports: list(
      object({
        name: string(),
        /** TCP (default) or UDP. */
        protocol: open(enumOf(['TCP', 'UDP'])),
        port: required(integer(undefined, { minimum: 1, maximum: 65535 })),
      }),
      { description: 'Ports to forward to the guest (masquerade).' },
    ),
    /** e.g. de:ad:00:00:be:af or DE-AD-00-00-BE-AF. */
    macAddress: string(),
    /** PXE boot priority; unique across disks and interfaces. */
    bootOrder: bootOrder('interface'),
  },
  { preserveUnknown: true, description: PRESERVED },
);

// Disk `d` is the only device with its boot order.
const soleBootOrder =
  'self.disks.exists_one(e, has(e.bootOrder) && e.bootOrder == d.bootOrder) && ' +
  '!(has(self.interfaces) && self.interfaces.exists(i, has(i.bootOrder) && i.bootOrder == d.bootOrder))';

export const devices = object(
  {
    disks: list(disk, { maxItems: MAX_DEVICES, rules: (at) => [uniqueNames(at, 'disk')] }),
    interfaces: list(iface, { maxItems: MAX_DEVICES, rules: (at) => [uniqueNames(at, 'interface')] }),
    /** virtiofs shares of volumes: typed so the node can refuse them by name (vkvm has no virtiofs), never pruned. */
    filesystems: notInCrd(unsupported(list(object({ name: string() }, { preserveUnknown: true })))),
    /** Add a default pod-network interface when none is given (default true). */
    autoattachPodInterface: notInCrd(boolean()),
    /** A virtio-blk queue per vCPU on every virtio disk (KubeVirt's blockMultiQueue). */
    blockMultiQueue: boolean('Give every virtio disk one request queue per vCPU.'),
    autoattachSerialConsole: notInCrd(boolean()),
    autoattachGraphicsDevice: notInCrd(boolean()),
    autoattachMemBalloon: notInCrd(boolean()),
  },
  {
    preserveUnknown: true,
    description: PRESERVED,
    rules: (at) => [
      {
        rule: `!has(self.disks) || self.disks.all(d, !has(d.bootOrder) || (${soleBootOrder}))`,
        message: `${at}.disks: two devices have the same bootOrder; boot orders must be unique across disks and interfaces`,
        fieldPath: '.disks',
      },
      {
        rule:
          '!has(self.interfaces) || self.interfaces.all(i, !has(i.bootOrder) || ' +
          'self.interfaces.exists_one(j, has(j.bootOrder) && j.bootOrder == i.bootOrder))',
        message: `${at}.interfaces: two interfaces have the same bootOrder; boot orders must be unique`,
        fieldPath: '.interfaces',
      },
    ],
  },
);

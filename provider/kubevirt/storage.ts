// Disks joined with their volumes by name, as KubeVirt does: a disk says how
// the guest sees the device (disk or cdrom, bus, boot order, read-only), the
// volume of the same name says where its bytes come from.
//
//   containerDisk          → an overlay on the image (pulled from its registry
//                            by the node agent: `path` in it, else the one file
//                            under /disk; or a host file, or an http(s) image
//                            downloaded into the cache)
//   emptyDisk              → a new sparse disk of `capacity`, removed with the VM
//   cloudInitNoCloud       → a NoCloud seed (cidata ISO) on the disk's device
//   hostDisk               → the file itself, raw, kept after the VM; DiskOrCreate
//                            also asks the caller to create it when missing
//   persistentVolumeClaim  → the bound PV (local, hostPath, or CSI as published
//                            for the pod): <path>/disk.img (Filesystem; created
//                            at the claim's capacity when missing, as KubeVirt's
//                            host-disk does) or the block device (Block)
//   dataVolume             → the DataVolume's claim, of the same name, as a
//                            persistentVolumeClaim (what the DataVolume imported
//                            is in it: provider/controllers/datavolumes/)
//
// Every other volume kind KubeVirt has is refused, naming the volume's field
// (NOT_PROVIDED): a guest that boots without a disk it was given may format a
// blank one in its place, or run with data missing, so dropping the disk is
// never an option. So are a `lun` disk and a `filesystems` entry.
import { join, posix } from 'node:path';
import { parseQuantity } from '../kube/quantity.js';
import type { DiskBus as VmDiskBus, DiskSource } from '../../vmm/spec.js';
import { noCloudData, noCloudMetaData } from './cloud-init.js';
import { parseImage } from '../vm-identity.js';
import { IMAGE_FORMS, pullPolicyOf } from './images.js';
import type { Draft } from './draft.js';
import { hasField } from './supported-fields.js';
import {
  DISK_BUSES,
  DISK_CACHES,
  DISK_IOS,
  type Disk,
  type DiskBus,
  type DiskCache,
  type DiskIo,
  type Filesystem,
  type Quantity,
  type Volume,
} from './types.js';

const MIB = 2 ** 20;
/** Kubernetes' DNS-1123 label, which KubeVirt requires of disk names (they become container names). */
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const VOLUME_KINDS = [
  'hostDisk',
  'persistentVolumeClaim',
  'cloudInitNoCloud',
  'cloudInitConfigDrive',
  'sysprep',
  'containerDisk',
  'ephemeral',
  'emptyDisk',
  'dataVolume',
  'configMap',
  'secret',
  'downwardAPI',
  'serviceAccount',
  'downwardMetrics',
  'memoryDump',
] as const;
type VolumeKind = (typeof VOLUME_KINDS)[number];

/** Why vkvm cannot provide each volume kind it does not handle (volumeSource), and what to use instead. */
const NOT_PROVIDED: Partial<Record<VolumeKind, string>> = {
  ephemeral: 'vkvm has no ephemeral (copy-on-write) claims: use a containerDisk, or the persistentVolumeClaim itself',
  cloudInitConfigDrive: 'vkvm writes NoCloud seeds only: use cloudInitNoCloud',
  sysprep: 'vkvm has no sysprep volumes',
  configMap: 'vkvm presents no ConfigMaps to guests',
  secret: 'vkvm presents no Secrets to guests as disks (cloudInitNoCloud.secretRef reads cloud-init data from one)',
  serviceAccount: 'vkvm presents no ServiceAccount tokens to guests',
  downwardAPI: 'vkvm presents no downward API volumes to guests',
  downwardMetrics: 'vkvm serves no downward metrics',
  memoryDump: 'vkvm takes no memory dumps',
};

export interface StorageInput {
  disks: Disk[];
  volumes: Volume[];
  filesystems: Filesystem[];
  /** cloud-init instance-id: the firmware UUID (KubeVirt), else the VMI uid. */
  instanceId: string;
  hostname: string;
}

/** KubeVirt's validatePath: absolute, not "/", no "." or ".." components or doubled slashes. */
export function isCleanAbsolutePath(path: string): boolean {
  return path !== '/' && posix.join('/', path) === path.replace(/\/$/, '');
}

/** Whole MiB in a quantity, rounded down as KubeVirt's AlignImageSizeTo1MiB does; reports and returns undefined when unusable. */
function sizeMiB(d: Draft, raw: Quantity | undefined, at: string): number | undefined {
  if (raw === undefined || raw === '') {
    d.report(at, 'FieldValueRequired', 'a size is required');
    return undefined;
  }
  // Only strings and numbers are quantities (String() of an object whose toString is not a function throws).
  const bytes = typeof raw === 'string' || typeof raw === 'number' ? parseQuantity(String(raw)) : null;
  if (bytes === null) {
    d.report(at, 'FieldValueInvalid', `${JSON.stringify(raw)} is not a resource quantity`);
    return undefined;
  }
  const mib = Math.floor(bytes / MIB);
  if (mib < 1) {
    d.report(at, 'FieldValueInvalid', `${raw} is smaller than the 1Mi a disk needs`);
    return undefined;
  }
  return mib;
}

type Resolved = { source: DiskSource; field: string; readOnly?: boolean } | null;

function containerDisk(d: Draft, volume: Volume, at: string): Resolved {
  const image = volume.containerDisk?.image;
  if (!image) {
    d.report(`${at}.image`, 'FieldValueRequired', 'containerDisk needs an image');
    return null;
  }
  const source = parseImage(image);
  switch (source?.kind) {
    case 'image':
      return { source: { kind: 'image', path: source.path }, field: `${at}.image` };
    case 'url':
      return { source: { kind: 'url', url: source.url }, field: `${at}.image` };
    case 'registry': {
      const path = volume.containerDisk?.path;
      if (path && !isCleanAbsolutePath(path)) {
        d.report(`${at}.path`, 'FieldValueInvalid', `${at}.path must be an absolute path to a file without relative components`);
        return null;
      }
      const pullPolicy = pullPolicyOf(d, volume.containerDisk?.imagePullPolicy, image, `${at}.imagePullPolicy`);
      return { source: { kind: 'registry', image: source.image, ...(path ? { path } : {}), pullPolicy }, field: `${at}.image` };
    }
    default:
      d.report(`${at}.image`, 'FieldValueNotSupported', `${JSON.stringify(image)} is not a disk image vkvm can use: give ${IMAGE_FORMS}`);
      return null;
  }
}

function hostDisk(d: Draft, volume: Volume, at: string): Resolved {
  const host = volume.hostDisk!;
  const before = d.causes.length;
  if (!host.path) d.report(`${at}.path`, 'FieldValueRequired', `${at}.path is required for hostDisk volume`);
  else if (!isCleanAbsolutePath(host.path))
    d.report(`${at}.path`, 'FieldValueInvalid', 'must be an absolute path to a file without relative components');
  if (host.type !== 'Disk' && host.type !== 'DiskOrCreate') {
    d.report(
      `${at}.type`,
      'FieldValueNotSupported',
      `${at}.type has invalid value '${host.type ?? ''}', allowed are 'Disk' or 'DiskOrCreate'`,
    );
  } else if (host.type === 'Disk' && host.capacity !== undefined && host.capacity !== '') {
    d.report(`${at}.capacity`, 'FieldValueInvalid', `${at}.capacity is allowed to pass only with ${at}.type equal to 'DiskOrCreate'`);
  }
  // KubeVirt creates a missing file at `capacity`; without one there is nothing to create it at.
  const createSizeMiB = host.type === 'DiskOrCreate' ? sizeMiB(d, host.capacity, `${at}.capacity`) : undefined;
  if (d.causes.length > before) return null;
  return { source: { kind: 'host', path: host.path, ...(createSizeMiB !== undefined ? { createSizeMiB } : {}) }, field: `${at}.path` };
}

/** A claim as a disk: `claim` is a persistentVolumeClaim volume's, or a dataVolume's (its name, not read-only). */
function persistentVolumeClaim(d: Draft, claim: { claimName: string; readOnly?: boolean }, field: string): Resolved {
  if (!claim.claimName) {
    d.report(field, 'FieldValueRequired', 'a claim name is required');
    return null;
  }
  const bound = d.ctx.pvcs[claim.claimName];
  if (!bound) {
    d.report(field, 'FieldValueNotFound', `claim "${claim.claimName}" is not bound to a volume this node serves`);
    return null;
  }
  if ('unservable' in bound) {
    d.report(field, 'FieldValueNotSupported', bound.unservable);
    return null;
  }
  const readOnly = claim.readOnly === true || (bound.kind === 'csi' && bound.volume.readOnly);
  const disk = bound.kind === 'csi' ? bound.diskPath : bound.volumeMode === 'Block' ? bound.hostPath : join(bound.hostPath, 'disk.img');
  if (bound.volumeMode === 'Block') {
    const ownDeviceNode = bound.kind === 'csi' ? { ownDeviceNode: true } : {};
    return { source: { kind: 'host', path: disk, fromPersistentVolume: true, ...ownDeviceNode }, field, readOnly };
  }
  const createSizeMiB = bound.capacity !== undefined ? sizeMiB(d, bound.capacity, field) : undefined;
  return {
    source: { kind: 'host', path: disk, fromPersistentVolume: true, ...(createSizeMiB !== undefined ? { createSizeMiB } : {}) },
    field,
    readOnly,
  };
}

function volumeSource(d: Draft, input: StorageInput, volume: Volume, at: string, cloudInit: { first?: string }): Resolved {
  if (volume.containerDisk) return containerDisk(d, volume, `${at}.containerDisk`);
  if (volume.emptyDisk) {
    const mib = sizeMiB(d, volume.emptyDisk.capacity, `${at}.emptyDisk.capacity`);
    return mib === undefined ? null : { source: { kind: 'empty', sizeMiB: mib }, field: `${at}.emptyDisk.capacity` };
  }
  if (volume.cloudInitNoCloud) {
    // KubeVirt reads only the first cloud-init volume, so a second would silently repeat it.
    if (cloudInit.first) {
      d.report(at, 'FieldValueDuplicate', `only one cloud-init volume is supported, and ${cloudInit.first} is one`);
      return null;
    }
    cloudInit.first = at;
    const data = noCloudData(d, volume.cloudInitNoCloud, `${at}.cloudInitNoCloud`);
    if (!data) return null;
    const source: DiskSource = { kind: 'cloudInit', userData: data.userData, metaData: noCloudMetaData(input.instanceId, input.hostname) };
    if (data.networkData !== undefined) source.networkConfig = data.networkData;
    return { source, field: `${at}.cloudInitNoCloud` };
  }
  if (volume.hostDisk) return hostDisk(d, volume, `${at}.hostDisk`);
  if (volume.persistentVolumeClaim) return persistentVolumeClaim(d, volume.persistentVolumeClaim, `${at}.persistentVolumeClaim.claimName`);
  if (volume.dataVolume) return persistentVolumeClaim(d, { claimName: volume.dataVolume.name }, `${at}.dataVolume.name`);
  // A kind handled by none of the above (a volume with several kinds is also reported by translateStorage).
  const kind = VOLUME_KINDS.find((k) => hasField(volume, k));
  if (kind) d.report(`${at}.${kind}`, 'FieldValueNotSupported', NOT_PROVIDED[kind] ?? `vkvm cannot provide a ${kind} volume`);
  return null;
}

function diskBus(d: Draft, disk: Disk, device: 'disk' | 'cdrom', at: string): VmDiskBus | undefined {
  const target = (device === 'cdrom' ? disk.cdrom : disk.disk) ?? {};
  const bus = target.bus || (device === 'cdrom' ? 'sata' : 'virtio');
  const path = `${at}.${device}.bus`;
  if (bus === 'ide') return void d.report(path, 'FieldValueNotSupported', 'IDE bus is not supported');
  if (!DISK_BUSES.includes(bus as DiskBus)) {
    return void d.report(
      path,
      'FieldValueNotSupported',
      `${at} is set with an unsupported bus ${bus}, must be one of: ${DISK_BUSES.join(', ')}`,
    );
  }
  if (bus === 'virtio' && device === 'cdrom')
    return void d.report(path, 'FieldValueInvalid', `Bus type ${bus} is invalid for CD-ROM device`);
  if (bus === 'sata' && device === 'disk' && disk.disk?.readonly)
    return void d.report(path, 'FieldValueInvalid', `${bus} hard-disks do not support read-only.`);
  return bus as DiskBus; // the VmSpec bus of the same name (crds/subset/constants.ts)
}

/**
 * The disk's cache and io modes as KubeVirt's admission checks them, for a
 * VMI that did not pass the CRD's enums; what the node can give is decided
 * there (vmm/disks/driver-modes.ts).
 */
function driverModes(d: Draft, disk: Disk, at: string): { cache?: DiskCache; io?: DiskIo } {
  const modes: { cache?: DiskCache; io?: DiskIo } = {};
  if (disk.cache) {
    if (DISK_CACHES.includes(disk.cache as DiskCache)) modes.cache = disk.cache as DiskCache;
    else d.report(`${at}.cache`, 'FieldValueInvalid', `${at}.cache has invalid value ${disk.cache}`);
  }
  if (disk.io) {
    if (DISK_IOS.includes(disk.io as DiskIo)) modes.io = disk.io as DiskIo;
    else
      d.report(
        `${at}.io`,
        'FieldValueNotSupported',
        `Disk IO mode for ${at}.io is not supported. Supported modes are: ${DISK_IOS.join(', ')}.`,
      );
  }
  // QEMU refuses native AIO without O_DIRECT; KubeVirt leaves it to fail the VM's start.
  if (modes.io === 'native' && modes.cache && modes.cache !== 'none')
    d.report(`${at}.io`, 'FieldValueInvalid', `io native needs cache none (O_DIRECT), but ${at}.cache is ${modes.cache}`);
  return modes;
}

/** Translates spec.domain.devices.disks with spec.volumes into d.disks. */
export function translateStorage(d: Draft, input: StorageInput): void {
  const volumeByName = new Map<string, number>();
  input.volumes.forEach((volume, j) => {
    const at = `spec.volumes[${j}]`;
    if (!volume.name) d.report(`${at}.name`, 'FieldValueRequired', 'a volume needs a name');
    else if (volumeByName.has(volume.name)) {
      d.report(
        `${at}.name`,
        'FieldValueDuplicate',
        `${at} and spec.volumes[${volumeByName.get(volume.name)}] must not have the same Name.`,
      );
    } else volumeByName.set(volume.name, j);
    const kinds = VOLUME_KINDS.filter((k) => hasField(volume, k));
    if (kinds.length !== 1) d.report(at, 'FieldValueInvalid', `${at} must have exactly one source type set`);
  });

  const diskByName = new Map<string, number>();
  const bootOrders = new Map<number, string>();
  const usedVolumes = new Set<number>();
  const cloudInit: { first?: string } = {};
  input.disks.forEach((disk, i) => {
    const at = `spec.domain.devices.disks[${i}]`;
    if (!disk.name) d.report(`${at}.name`, 'FieldValueRequired', 'a disk needs a name');
    else if (!DNS_LABEL.test(disk.name))
      d.report(`${at}.name`, 'FieldValueInvalid', `"${disk.name}" must be a DNS-1123 label (lower-case letters, digits, "-")`);
    else if (diskByName.has(disk.name)) {
      d.report(
        `${at}.name`,
        'FieldValueDuplicate',
        `${at} and spec.domain.devices.disks[${diskByName.get(disk.name)}] must not have the same Name.`,
      );
    } else diskByName.set(disk.name, i);

    // The disk uses its volume even when the disk itself cannot be realized.
    const j = disk.name ? volumeByName.get(disk.name) : undefined;
    if (j !== undefined) usedVolumes.add(j);

    const targets = (['disk', 'cdrom', 'lun'] as const).filter((k) => hasField(disk, k));
    if (targets.length > 1) return void d.report(at, 'FieldValueInvalid', `${at} can only have a single target type defined`);
    if (targets[0] === 'lun')
      return void d.report(`${at}.lun`, 'FieldValueNotSupported', 'vkvm attaches disks and CD-ROMs, not LUNs (SCSI pass-through)');
    const device = disk.cdrom ? 'cdrom' : 'disk';
    const bus = diskBus(d, disk, device, at);
    const modes = driverModes(d, disk, at);

    const readOnly = device === 'cdrom' || disk.disk?.readonly === true;
    if (device === 'cdrom') {
      if (disk.cdrom?.readonly === false) d.unsupported.push(`${at}.cdrom.readonly`); // vkvm's CD-ROMs are read-only
      if (disk.cdrom?.tray === 'open') d.unsupported.push(`${at}.cdrom.tray`);
    }
    if (disk.bootOrder !== undefined) {
      const order = disk.bootOrder;
      if (!Number.isInteger(order) || order < 1)
        d.report(`${at}.bootOrder`, 'FieldValueInvalid', `${at} must have a boot order > 0, if supplied`);
      else if (bootOrders.has(order)) {
        d.report(
          `${at}.bootOrder`,
          'FieldValueDuplicate',
          `Boot order for ${at}.bootOrder already set for a different device (${bootOrders.get(order)}).`,
        );
      } else bootOrders.set(order, at);
    }

    if (j === undefined) {
      if (disk.name)
        d.report(`${at}.name`, 'FieldValueNotFound', `${at}.name '${disk.name}' not found: no volume of that name in spec.volumes`);
      return;
    }
    const resolved = volumeSource(d, input, input.volumes[j]!, `spec.volumes[${j}]`, cloudInit);
    if (resolved === null || bus === undefined) return;
    d.disks.push({
      name: disk.name,
      device,
      bus,
      source: resolved.source,
      ...(readOnly || resolved.readOnly ? { readOnly: true } : {}),
      ...(disk.bootOrder !== undefined ? { bootOrder: disk.bootOrder } : {}),
      ...modes,
    });
    d.diskOrigins.push({ disk: at, device, source: resolved.field });
  });

  // A virtiofs share would hand the guest its volume as a filesystem; vkvm has none to hand.
  input.filesystems.forEach((filesystem, k) => {
    const j = filesystem.name ? volumeByName.get(filesystem.name) : undefined;
    if (j !== undefined) usedVolumes.add(j);
    d.report(
      `spec.domain.devices.filesystems[${k}]`,
      'FieldValueNotSupported',
      'vkvm shares no filesystems with guests (virtiofs): attach the volume as a disk',
    );
  });

  // KubeVirt's VMI admission rejects a volume no disk uses; the VMI controller
  // gave every volume without one a default disk before the VMI got a pod
  // (defaults.ts), so only a VMI that skipped it gets here.
  input.volumes.forEach((volume, j) => {
    const isMemoryDump = hasField(volume, 'memoryDump'); // KubeVirt exempts it
    if (usedVolumes.has(j) || !volume.name || isMemoryDump || volumeByName.get(volume.name) !== j) return;
    d.report(
      `spec.volumes[${j}].name`,
      'FieldValueInvalid',
      `spec.volumes[${j}].name '${volume.name}' not found: no disk of that name in spec.domain.devices.disks`,
    );
  });
}

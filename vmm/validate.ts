// Checks a VmSpec before anything is prepared or started, and reports every
// cause at once with its field path (as KubeVirt's admitters do), so a user
// fixes a spec in one round. Pure: checks that need the host (does an image
// file exist?) happen in disk preparation and raise the same SpecError.
import {
  DISK_BUSES,
  DISK_CACHES,
  DISK_IOS,
  VM_SPEC_VERSION,
  vcpuCount,
  type DiskSpec,
  type ImagePullPolicy,
  type InterfaceSpec,
  type VmSpec,
} from './spec.js';
import { SpecError, type SpecCause, type SpecCauseReason } from './errors.js';

export const MIN_MEMORY_MIB = 32;
/** QEMU's x86 limit without interrupt remapping (x2APIC IDs above 255 need an IOMMU). */
export const MAX_VCPUS = 255;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Disk and interface names become file names and libvirt aliases: a DNS label keeps them safe in both. */
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;
/** Linux interface names: at most 15 bytes, no slash or whitespace. */
const IFNAME = /^[^/\s:]{1,15}$/;
const MACHINE_TYPE = /^[a-z0-9][a-z0-9._-]*$/;
const PULL_POLICIES: readonly ImagePullPolicy[] = ['Always', 'IfNotPresent', 'Never'];

type Report = (path: string, reason: SpecCauseReason, message: string) => void;

const isPositiveInt = (n: unknown): n is number => Number.isInteger(n) && (n as number) > 0;
const isAbsolutePath = (p: unknown): p is string => typeof p === 'string' && p.startsWith('/');

/** A value from the spec as text for a message: JSON, since String() throws on an object whose toString is not a function. */
const shown = (v: unknown): string => JSON.stringify(v) ?? String(v);
function checkIdentity(spec: VmSpec, report: Report): void {
  if (spec.version !== VM_SPEC_VERSION)
    report('version', 'FieldValueNotSupported', `must be ${VM_SPEC_VERSION}, got ${shown(spec.version)}`);
  if (!UUID.test(spec.uid ?? '')) report('uid', 'FieldValueInvalid', 'must be a UUID (the libvirt domain uuid unless systemUuid is set)');
  if (spec.systemUuid !== undefined && !UUID.test(spec.systemUuid))
    report('systemUuid', 'FieldValueInvalid', 'must be a UUID (it becomes the libvirt domain uuid)');
  if (!spec.name) report('name', 'FieldValueRequired', 'must not be empty');
  else if (spec.name.includes('/') || spec.name.length > 200)
    report('name', 'FieldValueInvalid', 'must be at most 200 characters and contain no "/"');
  if (spec.machineType !== undefined && !MACHINE_TYPE.test(spec.machineType))
    report('machineType', 'FieldValueInvalid', `"${spec.machineType}" is not a QEMU machine type`);
}

function checkCompute(spec: VmSpec, report: Report): void {
  const { cpu } = spec;
  for (const field of ['sockets', 'cores', 'threads'] as const) {
    if (!isPositiveInt(cpu[field])) report(`cpu.${field}`, 'FieldValueInvalid', `must be a positive integer, got ${shown(cpu[field])}`);
  }
  const counted = (['sockets', 'cores', 'threads'] as const).every((f) => isPositiveInt(cpu[f]));
  if (counted && vcpuCount(cpu) > MAX_VCPUS) report('cpu', 'FieldValueInvalid', `${vcpuCount(cpu)} vCPUs exceed the limit of ${MAX_VCPUS}`);
  if (typeof cpu.model === 'object' && !cpu.model.named) report('cpu.model.named', 'FieldValueRequired', 'a named CPU model needs a name');
  if (typeof cpu.model === 'string' && cpu.model !== 'host-model' && cpu.model !== 'host-passthrough') {
    report('cpu.model', 'FieldValueNotSupported', `"${cpu.model}" is not supported: use host-model, host-passthrough or { named }`);
  }
  if (cpu.limitMillicores !== undefined && !isPositiveInt(cpu.limitMillicores))
    report('cpu.limitMillicores', 'FieldValueInvalid', 'must be a positive integer');
  if (cpu.requestMillicores !== undefined && !(Number.isInteger(cpu.requestMillicores) && cpu.requestMillicores >= 0))
    report('cpu.requestMillicores', 'FieldValueInvalid', 'must be a non-negative integer');
  if (!Number.isInteger(spec.memoryMiB) || spec.memoryMiB < MIN_MEMORY_MIB) {
    report('memoryMiB', 'FieldValueInvalid', `must be an integer of at least ${MIN_MEMORY_MIB} MiB, got ${shown(spec.memoryMiB)}`);
  }
}

function checkBoot(spec: VmSpec, report: Report): void {
  const { firmware, kernelBoot } = spec;
  if (firmware.kind !== 'bios' && firmware.kind !== 'efi') report('firmware.kind', 'FieldValueNotSupported', 'must be bios or efi');
  // Secure boot needs SMM, which QEMU offers on q35 machines only.
  if (firmware.kind === 'efi' && firmware.secureBoot && spec.machineType && !spec.machineType.includes('q35')) {
    report('firmware.secureBoot', 'FieldValueInvalid', `secure boot needs a q35 machine type, got ${spec.machineType}`);
  }
  if (!kernelBoot) return;
  if (!kernelBoot.kernelPath) report('kernelBoot.kernelPath', 'FieldValueRequired', 'direct kernel boot needs a kernel');
  else if (!isAbsolutePath(kernelBoot.kernelPath)) report('kernelBoot.kernelPath', 'FieldValueInvalid', 'must be an absolute host path');
  if (kernelBoot.initrdPath !== undefined && !isAbsolutePath(kernelBoot.initrdPath))
    report('kernelBoot.initrdPath', 'FieldValueInvalid', 'must be an absolute host path');
  const c = kernelBoot.container;
  if (c && (typeof c.image !== 'string' || !c.image)) report('kernelBoot.container.image', 'FieldValueRequired', 'must name an image');
  if (c && !PULL_POLICIES.includes(c.pullPolicy))
    report('kernelBoot.container.pullPolicy', 'FieldValueNotSupported', `must be one of ${PULL_POLICIES.join(', ')}`);
}

function checkDiskSource(disk: DiskSpec, at: string, report: Report): void {
  const source = disk.source;
  switch (source.kind) {
    case 'image':
    case 'host':
      if (!isAbsolutePath(source.path))
        report(`${at}.source.path`, source.path ? 'FieldValueInvalid' : 'FieldValueRequired', 'must be an absolute host path');
      if (source.kind === 'host' && source.createSizeMiB !== undefined && !isPositiveInt(source.createSizeMiB)) {
        report(`${at}.source.createSizeMiB`, 'FieldValueInvalid', 'must be a positive integer');
      }
      return;
    case 'registry':
      if (typeof source.image !== 'string' || !source.image) report(`${at}.source.image`, 'FieldValueRequired', 'must name an image');
      if (source.path !== undefined && !isAbsolutePath(source.path))
        report(`${at}.source.path`, 'FieldValueInvalid', 'must be an absolute path inside the image');
      if (!PULL_POLICIES.includes(source.pullPolicy))
        report(`${at}.source.pullPolicy`, 'FieldValueNotSupported', `must be one of ${PULL_POLICIES.join(', ')}`);
      return;
    case 'url': {
      const protocol = URL.canParse(source.url) ? new URL(source.url).protocol : null;
      if (protocol !== 'http:' && protocol !== 'https:') report(`${at}.source.url`, 'FieldValueInvalid', 'must be an http or https URL');
      return;
    }
    case 'empty':
      if (!isPositiveInt(source.sizeMiB)) report(`${at}.source.sizeMiB`, 'FieldValueInvalid', 'must be a positive integer');
      if (disk.device === 'cdrom') report(`${at}.device`, 'FieldValueInvalid', 'an empty disk cannot be a cdrom');
      return;
    case 'cloudInit':
      if (typeof source.userData !== 'string') report(`${at}.source.userData`, 'FieldValueRequired', 'must be a string (may be empty)');
      if (typeof source.metaData !== 'string') report(`${at}.source.metaData`, 'FieldValueRequired', 'must be a string (may be empty)');
      return;
    default:
      report(`${at}.source.kind`, 'FieldValueNotSupported', `unknown disk source "${(source as { kind: unknown }).kind}"`);
  }
}

/** Boot orders: positive and unique across disks and interfaces (libvirt refuses a repeat). */
function checkBootOrders(spec: VmSpec, report: Report): void {
  const seen = new Map<number, string>();
  const devices = [
    ...spec.disks.map((d, i) => [`disks[${i}]`, d.bootOrder] as const),
    ...spec.interfaces.map((n, i) => [`interfaces[${i}]`, n.bootOrder] as const),
  ];
  for (const [at, order] of devices) {
    if (order === undefined) continue;
    const other = seen.get(order);
    if (!isPositiveInt(order)) report(`${at}.bootOrder`, 'FieldValueInvalid', 'must be a positive integer');
    else if (other !== undefined) report(`${at}.bootOrder`, 'FieldValueDuplicate', `${order} is also the boot order of ${other}`);
    else seen.set(order, at);
  }
}

function checkClock(spec: VmSpec, report: Report): void {
  const clock = spec.clock;
  if (clock?.kind === 'utc' && clock.offsetSeconds !== undefined && !Number.isInteger(clock.offsetSeconds)) {
    report('clock.offsetSeconds', 'FieldValueInvalid', `must be a whole number of seconds, got ${shown(clock.offsetSeconds)}`);
  }
  if (clock?.kind === 'timezone' && !isTimeZone(clock.timezone)) {
    report('clock.timezone', 'FieldValueInvalid', `"${clock.timezone}" is not an IANA time zone (such as Europe/Paris)`);
  }
}

/** An IANA zone name the host's time zone database knows (libvirt resolves it on the host). */
function isTimeZone(name: string): boolean {
  if (!name) return false;
  try {
    new Intl.DateTimeFormat('en', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

/** QEMU's limit on a virtio-blk device's queues (VIRTIO_QUEUE_MAX is 1024, and virtio-blk caps num-queues at it). */
export const MAX_DISK_QUEUES = 1024;

/** iothreads: a count, and each disk's thread among them on a virtio disk (libvirt puts iothreads on virtio-blk only). */
function checkIoThreads(spec: VmSpec, report: Report): void {
  const count = spec.ioThreads;
  if (count !== undefined && !isPositiveInt(count))
    report('ioThreads', 'FieldValueInvalid', `must be a positive integer, got ${shown(count)}`);
  spec.disks.forEach((disk, i) => {
    const at = `disks[${i}]`;
    if (disk.ioThread !== undefined) {
      if (disk.bus !== 'virtio') report(`${at}.ioThread`, 'FieldValueInvalid', `an iothread needs bus virtio, not ${shown(disk.bus)}`);
      else if (!isPositiveInt(disk.ioThread) || !isPositiveInt(count) || disk.ioThread > count)
        report(`${at}.ioThread`, 'FieldValueInvalid', `${shown(disk.ioThread)} is not one of the VM's iothreads (1..${count ?? 0})`);
    }
    if (disk.queues !== undefined) {
      if (disk.bus !== 'virtio') report(`${at}.queues`, 'FieldValueInvalid', `queues need bus virtio, not ${shown(disk.bus)}`);
      else if (!isPositiveInt(disk.queues) || disk.queues > MAX_DISK_QUEUES)
        report(`${at}.queues`, 'FieldValueInvalid', `must be an integer from 1 to ${MAX_DISK_QUEUES}, got ${shown(disk.queues)}`);
    }
  });
}

function checkDisks(disks: DiskSpec[], report: Report): void {
  const names = new Map<string, number>();
  disks.forEach((disk, i) => {
    const at = `disks[${i}]`;
    checkName(disk.name, at, names, i, 'disks', report);
    if (disk.device !== 'disk' && disk.device !== 'cdrom') report(`${at}.device`, 'FieldValueNotSupported', 'must be disk or cdrom');
    if (!DISK_BUSES.includes(disk.bus))
      report(`${at}.bus`, 'FieldValueNotSupported', `"${disk.bus}" is not one of ${DISK_BUSES.join(', ')}`);
    else if (disk.device === 'cdrom' && disk.bus === 'virtio') report(`${at}.bus`, 'FieldValueInvalid', 'a cdrom needs bus sata or scsi');
    if (disk.cache !== undefined && !DISK_CACHES.includes(disk.cache))
      report(`${at}.cache`, 'FieldValueNotSupported', `"${disk.cache}" is not one of ${DISK_CACHES.join(', ')}`);
    if (disk.io !== undefined && !DISK_IOS.includes(disk.io))
      report(`${at}.io`, 'FieldValueNotSupported', `"${disk.io}" is not one of ${DISK_IOS.join(', ')}`);
    else if (disk.io === 'native' && disk.cache !== undefined && disk.cache !== 'none')
      report(`${at}.io`, 'FieldValueInvalid', `io native needs cache none (O_DIRECT), not ${disk.cache}`);
    checkDiskSource(disk, at, report);
  });
}

function checkInterfaces(interfaces: InterfaceSpec[], report: Report): void {
  const names = new Map<string, number>();
  const macs = new Map<string, number>();
  interfaces.forEach((nic, i) => {
    const at = `interfaces[${i}]`;
    checkName(nic.name, at, names, i, 'interfaces', report);
    if (nic.binding !== 'masquerade' && nic.binding !== 'bridge')
      report(`${at}.binding`, 'FieldValueNotSupported', 'must be masquerade or bridge');
    if (nic.model !== undefined && nic.model !== 'virtio' && nic.model !== 'e1000')
      report(`${at}.model`, 'FieldValueNotSupported', 'must be virtio or e1000');
    if (!MAC.test(nic.mac ?? '')) {
      report(`${at}.mac`, 'FieldValueInvalid', `"${nic.mac}" is not a lower-case, colon-separated MAC address`);
    } else if (parseInt(nic.mac.slice(0, 2), 16) & 1) {
      report(`${at}.mac`, 'FieldValueInvalid', `${nic.mac} is a multicast address; a NIC needs a unicast one`);
    } else if (nic.mac === '00:00:00:00:00:00') {
      report(`${at}.mac`, 'FieldValueInvalid', 'the all-zero MAC is no address; a NIC needs a unicast one');
    } else if (macs.has(nic.mac)) {
      report(`${at}.mac`, 'FieldValueDuplicate', `${nic.mac} is also the MAC of interfaces[${macs.get(nic.mac)}]`);
    } else {
      macs.set(nic.mac, i);
    }
    if (nic.tapDevice !== undefined && !IFNAME.test(nic.tapDevice))
      report(`${at}.tapDevice`, 'FieldValueInvalid', 'must be a Linux interface name (1-15 characters, no "/", ":" or spaces)');
  });
}

function checkName(name: string, at: string, seen: Map<string, number>, i: number, list: string, report: Report): void {
  if (!name) return report(`${at}.name`, 'FieldValueRequired', 'must not be empty');
  if (!DNS_LABEL.test(name))
    return report(`${at}.name`, 'FieldValueInvalid', `"${name}" must be a DNS label (lower-case letters, digits, "-")`);
  const other = seen.get(name);
  if (other !== undefined) return report(`${at}.name`, 'FieldValueDuplicate', `"${name}" is also the name of ${list}[${other}]`);
  seen.set(name, i);
}

/** Returns a SpecError listing every problem in the spec, or null when it can run. */
export function validateVmSpec(spec: VmSpec): SpecError | null {
  const causes: SpecCause[] = [];
  const report: Report = (path, reason, message) => void causes.push({ path, reason, message });
  checkIdentity(spec, report);
  checkCompute(spec, report);
  checkBoot(spec, report);
  checkDisks(spec.disks, report);
  checkIoThreads(spec, report);
  checkInterfaces(spec.interfaces, report);
  checkBootOrders(spec, report);
  checkClock(spec, report);
  return causes.length ? new SpecError(causes) : null;
}

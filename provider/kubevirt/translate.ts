// Pure translation of a kubevirt.io/v1 VirtualMachineInstance into a VmSpec,
// mirroring provider/pods/translate.ts. No I/O: what needs it (Secrets,
// bound PVCs) arrives resolved in the context; vmiReferences
// says what to resolve.
//
// KubeVirt semantics followed (file names are in kubevirt/kubevirt):
//   compute   see compute.ts
//   firmware  bios (bios.useSerial: its output on serial) unless
//             bootloader.efi; efi.secureBoot defaults to true and
//             needs features.smm (vmi-create-admitter); kernelBoot boots the
//             container's kernel/initrd with kernelArgs
//   iothreads see io-threads.ts (ioThreadsPolicy, dedicatedIOThread, blockMultiQueue)
//   devices   see storage.ts and network.ts; every VM gets the guest agent
//             channel (vkvm's guests run qemu-ga); ACPI unless disabled
//   uid       the VmSpec uid (launcher and domain identity) is the VMI uid,
//             so each VMI of a VM gets fresh containerDisk overlays as in
//             KubeVirt; firmware.uuid (else the VMI uid, as KubeVirt's
//             converter) is the guest's SMBIOS system UUID and cloud-init
//             instance-id, and seeds the derived MACs
//
// Fields outside the subset are not errors: translateVmi lists them in
// `unsupported` and the VM runs without them. Storage is the exception: a
// volume vkvm cannot provide is refused (storage.ts), never dropped, as the
// guest would run without its data. Values vkvm cannot realize in
// fields it does implement (a usb disk, an e1000e NIC) are errors, because
// running anyway would give the guest different hardware than it asked for.
import { SpecError, type SpecCause } from '../../vmm/errors.js';
import { validateVmSpec } from '../../vmm/validate.js';
import { VM_SPEC_VERSION, type Firmware, type GuestClock, type VmSpec } from '../../vmm/spec.js';
import { domainName, parseImage, type BootSource } from '../vm-identity.js';
import { newDraft, type Draft, type VmiTranslateContext } from './draft.js';
import { volumeClaimName } from './volume-claim.js';
import { pullPolicyOf } from './images.js';
import { translateNetwork } from './network.js';
import { isCleanAbsolutePath, translateStorage } from './storage.js';
import { SUPPORTED_VMI_SPEC, unsupportedFields } from './supported-fields.js';
import type { Clock, DomainSpec, VirtualMachineInstance } from './types.js';
import { RESOURCES, translateCompute, type Compute } from './compute.js';
import { translateIoThreads } from './io-threads.js';

export type { BoundClaim, UnservableClaim, VmiTranslateContext } from './draft.js';

export const LABEL = { namespace: 'vkvm.io/namespace', vmi: 'vkvm.io/vmi', vm: 'vkvm.io/vm' } as const;

export interface VmiTranslation {
  spec: VmSpec;
  /** KubeVirt field paths present in the VMI that vkvm does not realize, in document order; the VM runs without them. */
  unsupported: string[];
  /**
   * The same causes at the KubeVirt fields behind their VmSpec paths: for
   * errors found later, when the node prepares disks (an image that is not
   * there), so they too name the user's field.
   */
  atKubevirtFields(causes: readonly SpecCause[]): SpecCause[];
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

function translateFirmware(d: Draft, domain: DomainSpec): Firmware {
  const bootloader = domain.firmware?.bootloader;
  const at = 'spec.domain.firmware.bootloader';
  if (bootloader?.bios && bootloader.efi) {
    d.report(at, 'FieldValueInvalid', `${at} has both EFI and BIOS configured, but they are mutually exclusive.`);
  }
  const smm = domain.features?.smm;
  const smmOn = smm != null && smm.enabled !== false;
  if (!bootloader?.efi) {
    if (smmOn) d.unsupported.push('spec.domain.features.smm'); // vkvm turns SMM on for secure boot only
    return bootloader?.bios?.useSerial ? { kind: 'bios', useSerial: true } : { kind: 'bios' };
  }
  const secureBoot = bootloader.efi.secureBoot ?? true;
  if (secureBoot && !smmOn) {
    d.report(
      `${at}.efi.secureBoot`,
      'FieldValueInvalid',
      'EFI secure boot (the default with efi) requires SMM: set spec.domain.features.smm, or efi.secureBoot: false',
    );
  }
  if (!secureBoot && smmOn) d.unsupported.push('spec.domain.features.smm');
  return { kind: 'efi', secureBoot };
}

/** firmware.kernelBoot: an OCI image (pulled by the node agent) or a host directory holding kernelPath and initrdPath. */
function translateKernelBoot(d: Draft, domain: DomainSpec): void {
  const kb = domain.firmware?.kernelBoot;
  if (!kb) return;
  const K = 'spec.domain.firmware.kernelBoot';
  const C = `${K}.container`;
  const c = kb.container;
  if (!c) {
    if (kb.kernelArgs) d.report(`${K}.kernelArgs`, 'FieldValueInvalid', 'kernel arguments cannot be provided without an external kernel');
    return;
  }
  const before = d.causes.length;
  if (!c.image) d.report(`${C}.image`, 'FieldValueRequired', `${C} must be defined with an image`);
  if (!c.kernelPath && !c.initrdPath)
    d.report(C, 'FieldValueRequired', `${C} must be defined with at least one of the following: kernelPath, initrdPath`);
  for (const field of ['kernelPath', 'initrdPath'] as const) {
    const p = c[field];
    if (p && !isCleanAbsolutePath(p))
      d.report(`${C}.${field}`, 'FieldValueInvalid', `${C}.${field} must be an absolute path to a file without relative components`);
  }
  if (d.causes.length > before || !c.image) return;
  const source: BootSource | null = parseImage(c.image);
  const origin = { image: `${C}.image`, kernelPath: `${C}.kernelPath`, initrdPath: `${C}.initrdPath` };
  if (source?.kind === 'registry') {
    if (!c.kernelPath) return void d.report(`${C}.kernelPath`, 'FieldValueRequired', 'vkvm boots a kernel; an initrd alone is not enough');
    const pullPolicy = pullPolicyOf(d, c.imagePullPolicy, c.image, `${C}.imagePullPolicy`);
    d.kernelBoot = { kernelPath: c.kernelPath, container: { image: source.image, pullPolicy } };
    if (c.initrdPath) d.kernelBoot.initrdPath = c.initrdPath;
    if (kb.kernelArgs) d.kernelBoot.cmdline = kb.kernelArgs;
    d.kernelBootOrigin = origin;
  } else if (source?.kind === 'image') {
    // A host directory stands in for the container image's root.
    if (!c.kernelPath) return void d.report(`${C}.kernelPath`, 'FieldValueRequired', 'vkvm boots a kernel; an initrd alone is not enough');
    d.kernelBoot = { kernelPath: source.path.replace(/\/$/, '') + c.kernelPath };
    if (c.initrdPath) d.kernelBoot.initrdPath = source.path.replace(/\/$/, '') + c.initrdPath;
    if (kb.kernelArgs) d.kernelBoot.cmdline = kb.kernelArgs;
    d.kernelBootOrigin = origin;
  } else {
    d.report(
      `${C}.image`,
      'FieldValueNotSupported',
      `${JSON.stringify(c.image)} is not a kernel-boot image vkvm can use: give an OCI image or a host directory (/path or file:///path)`,
    );
  }
}

/** KubeVirt's dns.SanitizeHostname: spec.hostname, else the VMI name up to its first dot, at most 63 characters. */
function hostnameOf(vmi: VirtualMachineInstance): string {
  return vmi.spec.hostname || (vmi.metadata.name ?? '').split('.')[0]!.slice(0, 63);
}

/** KubeVirt's clock: utc (with its offset) or a time zone; KubeVirt's admitter refuses both at once (the CRD does too). */
function guestClock(clock: Clock | undefined): GuestClock | undefined {
  if (clock?.timezone) return { kind: 'timezone', timezone: clock.timezone };
  if (clock?.utc) return clock.utc.offsetSeconds ? { kind: 'utc', offsetSeconds: clock.utc.offsetSeconds } : { kind: 'utc' };
  return undefined;
}

/** The KubeVirt field behind a path in a VmSpec (a cause of validateVmSpec), so every cause names the user's field. */
function kubevirtField(path: string, d: Draft, compute: Compute): string {
  const disk = /^disks\[(\d+)\](?:\.(\w+))?/.exec(path);
  if (disk) {
    const o = d.diskOrigins[Number(disk[1])];
    if (!o) return 'spec.domain.devices.disks';
    switch (disk[2]) {
      case 'name':
      case 'bootOrder':
      case 'cache':
      case 'io':
        return `${o.disk}.${disk[2]}`;
      case 'bus':
        return `${o.disk}.${o.device}.bus`;
      case 'ioThread':
        return `${o.disk}.dedicatedIOThread`;
      case 'queues':
        return 'spec.domain.devices.blockMultiQueue';
      case 'device':
        return `${o.disk}.${o.device}`;
      case 'source':
        return o.source;
      default:
        return o.disk;
    }
  }
  const nic = /^interfaces\[(\d+)\](?:\.(\w+))?/.exec(path);
  if (nic) {
    const base = d.interfaceOrigins[Number(nic[1])] ?? 'spec.domain.devices.interfaces';
    return nic[2] === 'mac'
      ? `${base}.macAddress`
      : nic[2] === 'name' || nic[2] === 'model' || nic[2] === 'bootOrder'
        ? `${base}.${nic[2]}`
        : base;
  }
  const [head, sub] = path.split('.') as [string, string | undefined];
  switch (head) {
    case 'uid':
      return 'metadata.uid';
    case 'systemUuid':
      return 'spec.domain.firmware.uuid';
    case 'name':
      return 'metadata.name';
    case 'machineType':
      return 'spec.domain.machine.type';
    case 'ioThreads':
      return 'spec.domain.ioThreadsPolicy';
    case 'memoryMiB':
      return compute.memoryField;
    case 'cpu':
      if (sub === 'model') return 'spec.domain.cpu.model';
      if (sub === 'limitMillicores') return `${RESOURCES}.limits.cpu`;
      return compute.cpuField === 'spec.domain.cpu' && sub ? `spec.domain.cpu.${sub}` : compute.cpuField;
    case 'clock':
      return sub === 'timezone'
        ? 'spec.domain.clock.timezone'
        : sub === 'offsetSeconds'
          ? 'spec.domain.clock.utc.offsetSeconds'
          : 'spec.domain.clock';
    case 'firmware':
      return sub === 'secureBoot' ? 'spec.domain.firmware.bootloader.efi.secureBoot' : 'spec.domain.firmware.bootloader';
    case 'kernelBoot': {
      const o = d.kernelBootOrigin;
      if (!o) return 'spec.domain.firmware.kernelBoot';
      return sub === 'kernelPath' ? o.kernelPath : sub === 'initrdPath' ? o.initrdPath : o.image;
    }
    default:
      return 'spec';
  }
}

/** vmm's causes (VmSpec paths) at KubeVirt paths, device references in their messages renamed too. */
function atKubevirtFields(causes: readonly SpecCause[], d: Draft, compute: Compute): SpecCause[] {
  const rename = (message: string) =>
    message.replace(
      /\b(disks|interfaces)\[(\d+)\]/g,
      (token, list: string, i: string) => (list === 'disks' ? d.diskOrigins[Number(i)]?.disk : d.interfaceOrigins[Number(i)]) ?? token,
    );
  return causes.map((c) => ({ ...c, path: kubevirtField(c.path, d, compute), message: rename(c.message) }));
}

/** vmm's causes for the spec, at KubeVirt paths, minus those translation already reported at the same field. */
function vmmCauses(spec: VmSpec, d: Draft, compute: Compute): SpecCause[] {
  const error = validateVmSpec(spec);
  if (!error) return [];
  const reported = new Set(d.causes.map((c) => c.path));
  return atKubevirtFields(error.causes, d, compute).filter((c) => !reported.has(c.path));
}

/** Fields present in the VMI that vkvm does not realize (schema walk, then decisions by value), without repeats. */
function unsupportedOf(vmi: VirtualMachineInstance, d: Draft): string[] {
  const devices = vmi.spec.domain?.devices ?? {};
  const byValue = [...d.unsupported];
  if (devices.autoattachSerialConsole === false) byValue.push('spec.domain.devices.autoattachSerialConsole'); // always attached
  if (devices.autoattachMemBalloon === true) byValue.push('spec.domain.devices.autoattachMemBalloon');
  if (vmi.spec.domain?.features?.apic?.enabled === false) byValue.push('spec.domain.features.apic'); // always on
  return [...new Set([...unsupportedFields(vmi.spec, SUPPORTED_VMI_SPEC, 'spec'), ...byValue])];
}

/** Turns a VMI into the VmSpec its launcher runs, or a SpecError naming every KubeVirt field that cannot be realized. */
/**
 * A list the translators walk, when every entry is an object; otherwise (a
 * null or a number: the CRD's schema should refuse them, but the node never
 * trusts that) the first bad entry is a cause and the list is not walked.
 */
function objectsIn<T>(d: Draft, list: readonly T[] | undefined, at: string): T[] {
  if (list === undefined) return [];
  if (!Array.isArray(list)) {
    d.report(at, 'FieldValueInvalid', `${at} must be a list`);
    return [];
  }
  const bad = list.findIndex((item) => typeof item !== 'object' || item === null || Array.isArray(item));
  if (bad < 0) return [...list];
  d.report(`${at}[${bad}]`, 'FieldValueInvalid', `${at}[${bad}] must be an object`);
  return [];
}

export function translateVmi(vmi: VirtualMachineInstance, ctx: VmiTranslateContext): VmiTranslation | SpecError {
  const d = newDraft(ctx);
  const meta = vmi.metadata ?? {};
  const spec = vmi.spec ?? ({} as VirtualMachineInstance['spec']);
  const domain = spec.domain ?? {};
  const devices = domain.devices ?? {};
  if (!meta.uid) d.report('metadata.uid', 'FieldValueRequired', 'the VMI has no UID');
  if (!meta.name) d.report('metadata.name', 'FieldValueRequired', 'the VMI has no name');
  if (spec.architecture && spec.architecture !== 'amd64') {
    d.report('spec.architecture', 'FieldValueNotSupported', `vkvm runs amd64 guests, not ${spec.architecture}`);
  }
  if (spec.hostname && !DNS_LABEL.test(spec.hostname)) {
    d.report('spec.hostname', 'FieldValueInvalid', 'spec.hostname does not conform to the kubernetes DNS_LABEL rules');
  }
  const firmwareUuid = domain.firmware?.uuid || meta.uid || '';

  const compute = translateCompute(d, domain);
  const firmware = translateFirmware(d, domain);
  translateKernelBoot(d, domain);
  const disks = objectsIn(d, devices.disks, 'spec.domain.devices.disks');
  translateStorage(d, {
    disks,
    volumes: objectsIn(d, spec.volumes, 'spec.volumes'),
    filesystems: objectsIn(d, devices.filesystems, 'spec.domain.devices.filesystems'),
    instanceId: firmwareUuid,
    hostname: hostnameOf(vmi),
  });
  const ioThreads = translateIoThreads(d, domain, disks, compute.cpu);
  translateNetwork(d, {
    interfaces: objectsIn(d, devices.interfaces, 'spec.domain.devices.interfaces'),
    networks: objectsIn(d, spec.networks, 'spec.networks'),
    autoattachPodInterface: devices.autoattachPodInterface !== false,
    macSeed: firmwareUuid,
  });

  const namespace = meta.namespace || 'default';
  const owner = meta.ownerReferences?.find((o) => o.kind === 'VirtualMachine' && o.controller);
  const vmSpec: VmSpec = {
    version: VM_SPEC_VERSION,
    uid: meta.uid ?? '',
    ...(firmwareUuid ? { systemUuid: firmwareUuid } : {}),
    name: domainName(namespace, meta.name ?? ''),
    cpu: compute.cpu,
    memoryMiB: compute.memoryMiB,
    firmware,
    disks: d.disks,
    ...(ioThreads !== undefined ? { ioThreads } : {}),
    interfaces: d.interfaces,
    guestAgent: true,
    // KubeVirt's default: a display unless autoattachGraphicsDevice is false.
    vnc: devices.autoattachGraphicsDevice !== false,
    acpi: domain.features?.acpi?.enabled !== false,
    labels: { [LABEL.namespace]: namespace, [LABEL.vmi]: meta.name ?? '', ...(owner ? { [LABEL.vm]: owner.name } : {}) },
  };
  if (domain.machine?.type) vmSpec.machineType = domain.machine.type;
  if (d.kernelBoot) vmSpec.kernelBoot = d.kernelBoot;
  const clock = guestClock(domain.clock);
  if (clock) vmSpec.clock = clock;

  const causes = [...d.causes, ...vmmCauses(vmSpec, d, compute)];
  if (causes.length) return new SpecError(causes);
  return {
    spec: vmSpec,
    unsupported: unsupportedOf(vmi, d),
    atKubevirtFields: (later) => atKubevirtFields(later, d, compute),
  };
}

/** What the caller resolves before translateVmi: the Secrets and PVCs the VMI names. */
export function vmiReferences(vmi: VirtualMachineInstance): { secrets: string[]; claims: string[] } {
  const secrets = (vmi.spec?.volumes ?? []).flatMap((v) => [
    v.cloudInitNoCloud?.secretRef?.name,
    v.cloudInitNoCloud?.networkDataSecretRef?.name,
  ]);
  const claims = (vmi.spec?.volumes ?? []).map(volumeClaimName);
  const unique = (xs: Array<string | undefined>) => [...new Set(xs.filter((x): x is string => Boolean(x)))];
  return { secrets: unique(secrets), claims: unique(claims) };
}

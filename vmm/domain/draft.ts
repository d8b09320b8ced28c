// Typed model of the subset of libvirt domain XML that vkvm emits, in xml2js's
// own convention so xml.ts needs no mapping: `$` holds attributes, `_` holds
// text, a plain string is a text-only child, an array is repeated children.
import { domainUuidOf, type DiskBus, type DiskCache, type DiskIo, type VmSpec } from '../spec.js';
import type { DiskFormat, DomainRuntime } from './runtime.js';
import type { HostCaps } from '../probe/virtualization.js';

/** An element with neither attributes nor children, e.g. `<acpi/>`. */
export type Empty = Record<string, never>;

export interface OsDraft {
  $?: { firmware: 'efi' };
  type: { $: { arch: 'x86_64'; machine: string }; _: 'hvm' };
  firmware?: { feature: { $: { enabled: 'yes' | 'no'; name: 'secure-boot' | 'enrolled-keys' } }[] };
  kernel?: string;
  initrd?: string;
  cmdline?: string;
  bios?: { $: { useserial: 'yes' } };
}

export interface FeaturesDraft {
  acpi?: Empty;
  apic?: Empty;
  smm?: { $: { state: 'on' } };
  tcg?: { 'tb-cache': { $: { unit: 'MiB' }; _: number } };
}

export interface CpuDraft {
  $?: { mode: 'host-passthrough' | 'host-model' | 'custom'; match?: 'exact'; check?: 'none' };
  model?: { $: { fallback: 'forbid' }; _: string };
  topology?: { $: { sockets: number; cores: number; threads: number } };
}

export interface ClockDraft {
  $: { offset: 'utc'; adjustment?: string } | { offset: 'localtime' } | { offset: 'timezone'; timezone: string };
  timer: { $: { name: 'rtc' | 'pit' | 'hpet'; tickpolicy?: 'catchup' | 'delay'; present?: 'no' } }[];
}

export interface DiskDraft {
  $: { type: 'file' | 'block'; device: 'disk' | 'cdrom' };
  driver: {
    $: { name: 'qemu'; type: DiskFormat; cache: DiskCache; io?: DiskIo; discard?: 'unmap'; iothread?: number; queues?: number };
  };
  source: { $: { file: string } | { dev: string } };
  target: { $: { dev: string; bus: DiskBus } };
  readonly?: Empty;
  boot?: { $: { order: number } };
  alias: { $: { name: string } };
}

export interface ControllerDraft {
  $: { type: 'scsi'; index: number; model: 'virtio-scsi' };
}

export interface InterfaceDraft {
  $: { type: 'ethernet' };
  mac: { $: { address: string } };
  target?: { $: { dev: string; managed: 'no' } };
  model: { $: { type: 'virtio' | 'e1000' } };
  boot?: { $: { order: number } };
  alias: { $: { name: string } };
}

/** A unix-socket character device (serial, console or channel) whose socket QEMU binds. */
export interface UnixCharDraft<Target> {
  $: { type: 'unix' };
  source: { $: { mode: 'bind'; path: string } };
  target: { $: Target };
}

/** A VNC server on a unix socket QEMU listens on. */
export interface GraphicsDraft {
  $: { type: 'vnc' };
  listen: { $: { type: 'socket'; socket: string } };
}

export interface VideoDraft {
  model: { $: { type: 'vga'; vram: number; heads: number } };
}

export interface DevicesDraft {
  emulator: string;
  disk: DiskDraft[];
  controller: ControllerDraft[];
  interface: InterfaceDraft[];
  serial: UnixCharDraft<{ port: number }>[];
  console: UnixCharDraft<{ type: 'serial'; port: number }>[];
  channel: UnixCharDraft<{ type: 'virtio'; name: string }>[];
  graphics: GraphicsDraft[];
  video: VideoDraft[];
}

export interface DomainDraft {
  $: { type: 'kvm' | 'qemu' };
  name: string;
  uuid: string;
  memory?: { $: { unit: 'MiB' }; _: number };
  vcpu?: { $: { placement: 'static' }; _: number };
  iothreads?: number;
  os?: OsDraft;
  features?: FeaturesDraft;
  cpu: CpuDraft;
  clock?: ClockDraft;
  on_poweroff?: 'destroy';
  on_reboot?: 'restart';
  on_crash?: 'destroy';
  devices: DevicesDraft;
}

/** One section of the domain: pure, no I/O, mutates only the draft. */
export type DomainBuilder = (spec: VmSpec, host: HostCaps, runtime: DomainRuntime, draft: DomainDraft) => void;

/**
 * The skeleton the builders fill. Every section key is listed here, in
 * libvirt's own order, so the XML reads the same whatever order the builders
 * run in (object keys keep insertion order; xml.ts drops those left undefined).
 */
export function newDomainDraft(spec: VmSpec, runtime: DomainRuntime): DomainDraft {
  return {
    $: { type: 'qemu' }, // accel.ts decides
    name: spec.name,
    uuid: domainUuidOf(spec),
    memory: undefined,
    vcpu: undefined,
    iothreads: undefined,
    os: undefined,
    features: undefined,
    cpu: {},
    clock: undefined,
    on_poweroff: undefined,
    on_reboot: undefined,
    on_crash: undefined,
    devices: {
      emulator: runtime.emulatorPath,
      disk: [],
      controller: [],
      interface: [],
      serial: [],
      console: [],
      channel: [],
      graphics: [],
      video: [],
    },
  };
}

// spec.domain of a VMI: compute, firmware, clock and features (devices are in
// devices.ts), with KubeVirt's wire names (staging/src/kubevirt.io/api/core/v1).
import { PRESERVED } from './common.js';
import { IO_THREADS_POLICIES } from './constants.js';
import { devices } from './devices.js';
import { boolean, enumOf, integer, notInCrd, object, open, quantity, reading, resourceList, string, unsupported } from './field.js';

const count = (what: string) => integer(`Number of ${what}.`, { minimum: 0 });

const cpu = object(
  {
    cores: count('cores per socket'),
    sockets: count('sockets'),
    threads: count('threads per core'),
    /** "host-model" (KubeVirt's default), "host-passthrough", or a libvirt CPU model name. */
    model: string(),
  },
  { preserveUnknown: true, description: PRESERVED },
);

const memory = object(
  {
    /** Memory the guest sees; defaults to resources.requests.memory. */
    guest: quantity('Memory the guest sees.'),
  },
  { preserveUnknown: true, description: PRESERVED },
);

/** vkvm reads the cpu, memory and ephemeral-storage of a resource list. */
const computeResources = () => reading({ cpu: true, memory: true, 'ephemeral-storage': true }, resourceList());

const resources = object(
  { requests: computeResources(), limits: computeResources() },
  { preserveUnknown: true, description: 'Resources for the VM; requests.memory sizes the guest unless memory.guest is set.' },
);

const machine = object({ type: string('Machine type, e.g. q35.') }, { preserveUnknown: true });

const efi = object(
  {
    /** Defaults to true in KubeVirt, and then requires features.smm. */
    secureBoot: boolean(),
    persistent: unsupported(boolean()),
  },
  { preserveUnknown: true },
);

const kernelBootContainer = object(
  {
    image: string(),
    imagePullPolicy: notInCrd(string()),
    /** A Secret (kubernetes.io/dockerconfigjson) of the VMI's namespace; one of the launcher pod's imagePullSecrets. */
    imagePullSecret: string(),
    /** Absolute path of the kernel inside the image. */
    kernelPath: string(),
    /** Absolute path of the initrd inside the image. */
    initrdPath: string(),
  },
  { preserveUnknown: true },
);

const firmware = object(
  {
    /** Reported by the guest firmware; the VM controller fixes it per VM so it survives restarts. */
    uuid: string('SMBIOS UUID of the guest.'),
    bootloader: object(
      {
        bios: object({ useSerial: boolean() }, { preserveUnknown: true }),
        efi,
      },
      { preserveUnknown: true },
    ),
    kernelBoot: object({ kernelArgs: string(), container: kernelBootContainer }, { preserveUnknown: true }),
  },
  { preserveUnknown: true, description: PRESERVED },
);

export const clock = object(
  { utc: object({ offsetSeconds: integer() }, { preserveUnknown: true }), timezone: string() },
  {
    preserveUnknown: true,
    description: PRESERVED,
    rules: (at) => [{ rule: '!(has(self.utc) && has(self.timezone))', message: `${at}: set utc or timezone, not both` }],
  },
);

/** A feature that is on when present, unless `enabled` is false. */
const featureState = () => object({ enabled: boolean() }, { preserveUnknown: true });

const features = object(
  {
    /** ACPI; on unless enabled is false. */
    acpi: featureState(),
    // translate.ts decides on these by value: APIC is always on, SMM is on for secure boot only.
    apic: reading(true, notInCrd(featureState())),
    smm: reading(true, notInCrd(featureState())),
  },
  { preserveUnknown: true, description: PRESERVED },
);

/** KubeVirt's values; supplementalPool is refused by translate.ts (it needs libvirt 10 and QEMU 9). */
const ioThreadsPolicy = open(
  enumOf(
    IO_THREADS_POLICIES,
    "QEMU iothreads for the virtio disks: shared (one for all), auto (a pool of two per requested CPU, disks spread over it). A disk's dedicatedIOThread gives it one of its own.",
  ),
);

export const domain = object(
  { cpu, memory, resources, machine, firmware, clock, features, ioThreadsPolicy, devices },
  { preserveUnknown: true, description: `The virtual hardware. ${PRESERVED}` },
);

// The instancetype.kubevirt.io/v1beta1 subset: what an instancetype sets on
// the VMIs of the VMs that name it (CPU count and model, memory and its
// overcommit, node selector, annotations) and the preferences vkvm applies
// (disk and interface models, CPU topology, firmware, machine, features,
// grace period) with the requirements a preference puts on its instancetype.
// Everything else is kept as given, so KubeVirt's common-instancetypes bundle
// applies unchanged: an instancetype field vkvm cannot honour (dedicated
// CPUs, hugepages, NUMA, GPUs, …) refuses the VMs that use it, naming the
// field (provider/kubevirt/instancetype/); a preference vkvm cannot honour is
// ignored, as KubeVirt's preferences are hints.
import type { IoThreadsPolicy } from './constants.js';
import { boolean, enumOf, integer, object, opaque, quantity, required, string, stringMap, unsupported } from './field.js';

export const INSTANCETYPE_GROUP = 'instancetype.kubevirt.io';
export const INSTANCETYPE_VERSION = 'v1beta1';
export const INSTANCETYPE_API_VERSION = `${INSTANCETYPE_GROUP}/${INSTANCETYPE_VERSION}` as const;

/** The four kinds with their plurals, as KubeVirt names them (staging/src/kubevirt.io/api/instancetype/register.go). */
export const INSTANCETYPE_KINDS = {
  VirtualMachineInstancetype: { plural: 'virtualmachineinstancetypes', cluster: false },
  VirtualMachineClusterInstancetype: { plural: 'virtualmachineclusterinstancetypes', cluster: true },
  VirtualMachinePreference: { plural: 'virtualmachinepreferences', cluster: false },
  VirtualMachineClusterPreference: { plural: 'virtualmachineclusterpreferences', cluster: true },
} as const;
export type InstancetypeKind = keyof typeof INSTANCETYPE_KINDS;

const PRESERVED_HERE = 'Fields vkvm does not support are kept as given.';

const instancetypeCpu = object(
  {
    guest: required(integer('Number of vCPUs the guest sees.', { minimum: 1 })),
    model: string('CPU model: host-model, host-passthrough, or a libvirt model name.'),
    dedicatedCPUPlacement: unsupported(boolean()),
    isolateEmulatorThread: unsupported(boolean()),
    maxSockets: unsupported(integer()),
    numa: unsupported(opaque()),
    realtime: unsupported(opaque()),
  },
  { preserveUnknown: true, description: PRESERVED_HERE },
);

const instancetypeMemory = object(
  {
    guest: required(quantity('Memory the guest sees.')),
    overcommitPercent: integer('Percent of guest memory left out of the pod request.', { minimum: 0, maximum: 100 }),
    hugepages: unsupported(opaque()),
    maxGuest: unsupported(quantity()),
  },
  { preserveUnknown: true, description: PRESERVED_HERE },
);

export const instancetypeSpec = object(
  {
    cpu: required(instancetypeCpu),
    memory: required(instancetypeMemory),
    nodeSelector: stringMap(),
    annotations: stringMap('Annotations added to the VMI.'),
    schedulerName: unsupported(string()),
    /** Set on the VMI's spec.domain.ioThreadsPolicy; a VMI that sets it too conflicts. */
    ioThreadsPolicy: string<IoThreadsPolicy>("The VMI's spec.domain.ioThreadsPolicy."),
    launchSecurity: unsupported(opaque()),
    gpus: unsupported(opaque()),
    hostDevices: unsupported(opaque()),
  },
  { preserveUnknown: true, description: `VirtualMachineInstancetypeSpec. ${PRESERVED_HERE}` },
);

export const CPU_TOPOLOGIES = [
  'sockets',
  'cores',
  'threads',
  'spread',
  'any',
  'preferSockets',
  'preferCores',
  'preferThreads',
  'preferSpread',
  'preferAny',
] as const;
export const SPREAD_ACROSS = ['SocketsCores', 'CoresThreads', 'SocketsCoresThreads'] as const;

const featureState = () => object({ enabled: boolean() }, { preserveUnknown: true });

export const preferenceSpec = object(
  {
    cpu: object(
      {
        preferredCPUTopology: string<(typeof CPU_TOPOLOGIES)[number]>(),
        spreadOptions: object(
          { across: string<(typeof SPREAD_ACROSS)[number]>(), ratio: integer(undefined, { minimum: 1 }) },
          { preserveUnknown: true },
        ),
      },
      { preserveUnknown: true },
    ),
    preferSpreadSocketToCoreRatio: integer(undefined, { minimum: 0 }),
    devices: object(
      {
        preferredDiskBus: string(),
        preferredDiskDedicatedIoThread: boolean(),
        preferredBlockMultiQueue: boolean(),
        preferredCdromBus: string(),
        preferredInterfaceModel: string(),
        preferredAutoattachGraphicsDevice: boolean(),
        preferredAutoattachPodInterface: boolean(),
      },
      { preserveUnknown: true },
    ),
    features: object(
      { preferredAcpi: featureState(), preferredApic: featureState(), preferredSmm: featureState() },
      { preserveUnknown: true },
    ),
    firmware: object(
      {
        preferredUseBios: boolean(),
        preferredUseBiosSerial: boolean(),
        preferredUseEfi: boolean(),
        preferredUseSecureBoot: boolean(),
        preferredEfi: object({ secureBoot: boolean(), persistent: boolean() }, { preserveUnknown: true }),
      },
      { preserveUnknown: true },
    ),
    machine: object({ preferredMachineType: string() }, { preserveUnknown: true }),
    preferredTerminationGracePeriodSeconds: integer(undefined, { format: 'int64', minimum: 0 }),
    requirements: object(
      {
        cpu: object({ guest: required(integer(undefined, { minimum: 1 })) }, { preserveUnknown: true }),
        memory: object({ guest: required(quantity()) }, { preserveUnknown: true }),
      },
      { preserveUnknown: true, description: 'What an instancetype (or the VM) must give a VM using this preference.' },
    ),
    annotations: stringMap('Annotations added to the VMI.'),
  },
  { preserveUnknown: true, description: `VirtualMachinePreferenceSpec: hints. ${PRESERVED_HERE}` },
);

/** The matcher on a VM (spec.instancetype, spec.preference) and the reference the controller keeps in its status. */
export const matcher = (what: string) =>
  object(
    {
      name: string(`Name of the ${what}.`),
      kind: string(`Kind of the ${what}; the cluster-scoped one when empty.`),
      revisionName: string('The ControllerRevision to take it from instead.'),
      inferFromVolume: string(`Volume whose PVC labels name the ${what}.`),
      inferFromVolumeFailurePolicy: enumOf(['Reject', 'Ignore'] as const),
    },
    { preserveUnknown: true },
  );

export const statusRef = object(
  {
    name: string(),
    kind: string(),
    controllerRevisionRef: object({ name: string() }, { preserveUnknown: true }),
    inferFromVolume: string(),
    inferFromVolumeFailurePolicy: string(),
  },
  { preserveUnknown: true },
);

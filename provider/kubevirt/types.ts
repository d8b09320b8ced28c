// The kubevirt.io/v1 subset vkvm runs, with KubeVirt's wire names
// (staging/src/kubevirt.io/api/core/v1/types.go and schema.go). Objects arrive
// as plain JSON from the custom-objects API, so timestamps are RFC 3339
// strings and quantities are strings (or numbers, as JSON allows), never Date
// or parsed values. Fields outside the subset are not typed here but are kept
// on the object: translate.ts finds and reports them (see supported-fields.ts).
import type { V1Affinity, V1Toleration } from '@kubernetes/client-node';

export const KUBEVIRT_API_VERSION = 'kubevirt.io/v1';

/** A resource.Quantity on the wire: "64M", "1Gi", "500m", or a bare JSON number. */
export type Quantity = string | number;
/** A metav1.Time on the wire (RFC 3339). */
export type Time = string;

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: Time;
  deletionTimestamp?: Time;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  finalizers?: string[];
}

export interface LocalObjectReference {
  name?: string;
}

// ---- domain ----

export interface ResourceRequirements {
  /** Valid keys are "memory" and "cpu". */
  requests?: Record<string, Quantity>;
  limits?: Record<string, Quantity>;
}

export interface Cpu {
  cores?: number;
  sockets?: number;
  threads?: number;
  /** "host-model" (KubeVirt's default), "host-passthrough", or a libvirt CPU model name. */
  model?: string;
}

export interface Memory {
  /** Memory the guest sees; defaults to resources.requests.memory. */
  guest?: Quantity;
}

export interface Machine {
  type?: string;
}

export interface Bios {
  useSerial?: boolean;
}

export interface Efi {
  /** Defaults to true in KubeVirt, and then requires features.smm. */
  secureBoot?: boolean;
  persistent?: boolean;
}

export interface Bootloader {
  bios?: Bios;
  efi?: Efi;
}

export interface KernelBootContainer {
  image?: string;
  imagePullPolicy?: string;
  /** Absolute path of the kernel inside the image. */
  kernelPath?: string;
  /** Absolute path of the initrd inside the image. */
  initrdPath?: string;
}

export interface KernelBoot {
  kernelArgs?: string;
  container?: KernelBootContainer;
}

export interface Firmware {
  /** Reported by the guest firmware; the VM controller fixes it per VM so it survives restarts. */
  uuid?: string;
  bootloader?: Bootloader;
  kernelBoot?: KernelBoot;
}

export interface ClockOffsetUtc {
  offsetSeconds?: number;
}

export interface Clock {
  utc?: ClockOffsetUtc;
  timezone?: string;
}

export interface FeatureState {
  /** Defaults to true when the feature is present. */
  enabled?: boolean;
}

export interface Features {
  /** ACPI; on unless enabled is false. */
  acpi?: FeatureState;
  apic?: FeatureState;
  smm?: FeatureState;
}

export type DiskBus = 'virtio' | 'sata' | 'scsi' | 'usb';

export interface DiskTarget {
  bus?: DiskBus | string;
  readonly?: boolean;
}

export interface CdromTarget {
  bus?: DiskBus | string;
  /** Defaults to true. */
  readonly?: boolean;
  tray?: 'open' | 'closed';
}

export interface Disk {
  /** Also the name of the volume that backs the disk. */
  name: string;
  /** Exactly one of disk, cdrom (or lun, which vkvm does not support); none means disk. */
  disk?: DiskTarget;
  cdrom?: CdromTarget;
  /** 1 boots first; unique across disks and interfaces. */
  bootOrder?: number;
}

export interface Port {
  name?: string;
  /** TCP (default) or UDP. */
  protocol?: 'TCP' | 'UDP' | string;
  port: number;
}

export interface Interface {
  /** Also the name of the network the interface connects to. */
  name: string;
  /** virtio (default) or e1000 in vkvm. */
  model?: string;
  /** Binding: exactly one of masquerade or bridge (KubeVirt's default) in vkvm. */
  masquerade?: Record<string, never>;
  bridge?: Record<string, never>;
  /** Ports forwarded to the guest with masquerade; none listed forwards all. */
  ports?: Port[];
  /** e.g. de:ad:00:00:be:af or DE-AD-00-00-BE-AF. */
  macAddress?: string;
  /** PXE boot priority; unique across disks and interfaces. */
  bootOrder?: number;
}

export interface Devices {
  disks?: Disk[];
  interfaces?: Interface[];
  /** Add a default pod-network interface when none is given (default true). */
  autoattachPodInterface?: boolean;
  autoattachSerialConsole?: boolean;
  autoattachGraphicsDevice?: boolean;
  autoattachMemBalloon?: boolean;
}

export interface DomainSpec {
  resources?: ResourceRequirements;
  cpu?: Cpu;
  memory?: Memory;
  machine?: Machine;
  firmware?: Firmware;
  clock?: Clock;
  features?: Features;
  devices?: Devices;
}

// ---- networks and volumes ----

export interface PodNetwork {
  vmNetworkCIDR?: string;
  vmIPv6NetworkCIDR?: string;
}

export interface Network {
  name: string;
  /** The pod network; the only source vkvm supports (KubeVirt defaults to it). */
  pod?: PodNetwork;
}

export interface ContainerDiskSource {
  image: string;
  imagePullPolicy?: string;
}

export interface CloudInitNoCloudSource {
  /** A Secret holding the user data under key "userdata" (or "userData"). */
  secretRef?: LocalObjectReference;
  userDataBase64?: string;
  userData?: string;
  /** A Secret holding the network data under key "networkdata" (or "networkData"). */
  networkDataSecretRef?: LocalObjectReference;
  networkDataBase64?: string;
  networkData?: string;
}

export interface EmptyDiskSource {
  capacity: Quantity;
}

export interface PersistentVolumeClaimSource {
  claimName: string;
  readOnly?: boolean;
}

export type HostDiskType = 'Disk' | 'DiskOrCreate';

export interface HostDisk {
  /** The disk image file on the node. */
  path: string;
  /** Disk: the file must exist; DiskOrCreate: a sparse file of `capacity` is made if it does not. */
  type: HostDiskType | string;
  capacity?: Quantity;
}

export interface Volume {
  /** Must match a disk's name. Exactly one source below. */
  name: string;
  containerDisk?: ContainerDiskSource;
  cloudInitNoCloud?: CloudInitNoCloudSource;
  emptyDisk?: EmptyDiskSource;
  persistentVolumeClaim?: PersistentVolumeClaimSource;
  hostDisk?: HostDisk;
}

// ---- VirtualMachineInstance ----

export interface VirtualMachineInstanceSpec {
  domain: DomainSpec;
  nodeSelector?: Record<string, string>;
  affinity?: V1Affinity;
  tolerations?: V1Toleration[];
  /** Seconds the guest gets to shut down before it is killed (KubeVirt default 30). */
  terminationGracePeriodSeconds?: number;
  /** The guest's hostname (cloud-init local-hostname); defaults to the VMI name. */
  hostname?: string;
  /** amd64 only in vkvm. */
  architecture?: string;
  networks?: Network[];
  volumes?: Volume[];
}

export type VmiPhase = '' | 'Pending' | 'Scheduling' | 'Scheduled' | 'Running' | 'Succeeded' | 'Failed' | 'Unknown';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** VMI condition types KubeVirt defines; vkvm sets the ones it can observe. */
export type VmiConditionType =
  | 'Ready'
  | 'Paused'
  | 'Synchronized'
  | 'AgentConnected'
  | 'LiveMigratable'
  | 'PodScheduled'
  | 'Provisioning'
  | (string & {});

export interface Condition<T extends string = string> {
  type: T;
  status: ConditionStatus;
  lastProbeTime?: Time | null;
  lastTransitionTime?: Time | null;
  reason?: string;
  message?: string;
}

export interface VmiPhaseTransitionTimestamp {
  phase: VmiPhase;
  phaseTransitionTimestamp: Time;
}

export interface VmiNetworkInterfaceStatus {
  /** The network / interface name. */
  name?: string;
  ipAddress?: string;
  ipAddresses?: string[];
  mac?: string;
  /** The interface name inside the guest. */
  interfaceName?: string;
  /** domain, guest-agent or multus-status (comma-separated). */
  infoSource?: string;
}

export interface VmiGuestOsInfo {
  name?: string;
  kernelRelease?: string;
  version?: string;
  prettyName?: string;
  versionId?: string;
  kernelVersion?: string;
  machine?: string;
  id?: string;
}

export interface VirtualMachineInstanceStatus {
  phase?: VmiPhase;
  phaseTransitionTimestamps?: VmiPhaseTransitionTimestamp[];
  nodeName?: string;
  /** A brief CamelCase reason for the current phase, e.g. NodeUnresponsive. */
  reason?: string;
  conditions?: Condition<VmiConditionType>[];
  interfaces?: VmiNetworkInterfaceStatus[];
  guestOSInfo?: VmiGuestOsInfo;
}

export interface VirtualMachineInstance {
  apiVersion?: typeof KUBEVIRT_API_VERSION;
  kind?: 'VirtualMachineInstance';
  metadata: ObjectMeta;
  spec: VirtualMachineInstanceSpec;
  status?: VirtualMachineInstanceStatus;
}

// ---- VirtualMachine ----

export type RunStrategy = 'Always' | 'Halted' | 'Manual' | 'RerunOnFailure' | 'Once';
export const RUN_STRATEGIES: readonly RunStrategy[] = ['Always', 'Halted', 'Manual', 'RerunOnFailure', 'Once'];

export interface VirtualMachineInstanceTemplateSpec {
  metadata?: Pick<ObjectMeta, 'labels' | 'annotations'>;
  spec: VirtualMachineInstanceSpec;
}

export interface VirtualMachineSpec {
  /** Deprecated: true is runStrategy Always, false is Halted. Mutually exclusive with runStrategy. */
  running?: boolean;
  runStrategy?: RunStrategy;
  template: VirtualMachineInstanceTemplateSpec;
}

/** KubeVirt's VirtualMachinePrintableStatus values (the `kubectl get vm` STATUS column). */
export type PrintableStatus =
  | 'Stopped'
  | 'Provisioning'
  | 'Starting'
  | 'Running'
  | 'Paused'
  | 'Stopping'
  | 'Terminating'
  | 'CrashLoopBackOff'
  | 'Migrating'
  | 'Unknown'
  | 'ErrorUnschedulable'
  | 'ErrImagePull'
  | 'ImagePullBackOff'
  | 'ErrorPvcNotFound'
  | 'DataVolumeError'
  | 'WaitingForVolumeBinding';

/** Consecutive VMIs that failed before ever running, for the crash-loop back-off. */
export interface VirtualMachineStartFailure {
  consecutiveFailCount?: number;
  lastFailedVMIUID?: string;
  retryAfterTimestamp?: Time;
}

export interface VirtualMachineStateChangeRequest {
  /** Start or Stop (virtctl start/stop/restart write these). */
  action: 'Start' | 'Stop';
  data?: Record<string, string>;
  /** The VMI a Stop request applies to. */
  uid?: string;
}

export type VmConditionType = 'Ready' | 'Failure' | 'Paused' | 'RestartRequired' | (string & {});

export interface VirtualMachineStatus {
  printableStatus?: PrintableStatus;
  /** A VMI exists for this VM. */
  created?: boolean;
  /** The VMI exists and is Ready. */
  ready?: boolean;
  conditions?: Condition<VmConditionType>[];
  startFailure?: VirtualMachineStartFailure;
  stateChangeRequests?: VirtualMachineStateChangeRequest[];
  /** The run strategy the controller last acted on (RerunOnFailure needs it). */
  runStrategy?: RunStrategy;
}

export interface VirtualMachine {
  apiVersion?: typeof KUBEVIRT_API_VERSION;
  kind?: 'VirtualMachine';
  metadata: ObjectMeta;
  spec: VirtualMachineSpec;
  status?: VirtualMachineStatus;
}

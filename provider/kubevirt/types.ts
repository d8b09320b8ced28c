// The kubevirt.io/v1 subset vkvm runs, with KubeVirt's wire names: the spec
// and status types are derived from the subset table in crds/subset/, which
// also gives the CRD schema and the supported-field tree (supported-fields.ts),
// so a field is added there, once. Objects arrive as plain JSON from the
// custom-objects API, so timestamps are RFC 3339 strings and quantities are
// strings (or numbers, as JSON allows), never Date or parsed values. Fields
// outside the subset are not typed but are kept on the object: translate.ts
// finds and reports them.
import type { KUBEVIRT_API_VERSION } from '../../crds/subset/constants.js';
import type { devices, disk, iface } from '../../crds/subset/devices.js';
import type { clock, domain } from '../../crds/subset/domain.js';
import type { Time, TypeOf } from '../../crds/subset/field.js';
import type { condition, startFailure, vmiStatus, vmStatus } from '../../crds/subset/status.js';
import type { vmSpec } from '../../crds/subset/vm.js';
import type { network, vmiSpec } from '../../crds/subset/vmi.js';
import type { migrationConfiguration, migrationState, vmimSpec, vmimStatus } from '../../crds/subset/migration.js';
import type { migrationPolicySpec } from '../../crds/subset/migration-policy.js';
import type { cloudInitNoCloud, volume } from '../../crds/subset/volumes.js';
import type { instancetypeSpec, preferenceSpec, statusRef } from '../../crds/subset/instancetype.js';

export {
  DISK_BUSES,
  DISK_CACHES,
  DISK_IOS,
  EVICTION_STRATEGIES,
  GROUP,
  KUBEVIRT_API_VERSION,
  RUN_STRATEGIES,
  VERSION,
  VM_PLURAL,
  VMI_PLURAL,
  VMIM_PLURAL,
  MIGRATIONS_GROUP,
  MIGRATIONS_VERSION,
  MIGRATION_POLICY_PLURAL,
  type DiskBus,
  type DiskCache,
  type DiskIo,
  type EvictionStrategy,
  type RunStrategy,
} from '../../crds/subset/constants.js';
export type { Quantity } from '../../crds/subset/field.js';
export type { PrintableStatus, VmConditionType, VmiPhase } from '../../crds/subset/status.js';
export type { MigrationAbortStatus, MigrationMethod, MigrationMode, MigrationPhase } from '../../crds/subset/migration.js';

/** `vkvm.io/paused: "true"` on a VMI pauses its vCPUs (virtctl pause sets it); the node applies it whenever the VM differs. */
export const PAUSED_ANNOTATION = 'vkvm.io/paused';

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

export type DomainSpec = TypeOf<typeof domain>;
export type Clock = TypeOf<typeof clock>;
export type Disk = TypeOf<typeof disk>;
export type Filesystem = NonNullable<TypeOf<typeof devices>['filesystems']>[number];
export type Interface = TypeOf<typeof iface>;
export type Network = TypeOf<typeof network>;
export type Volume = TypeOf<typeof volume>;
export type CloudInitNoCloudSource = TypeOf<typeof cloudInitNoCloud>;
export type LocalObjectReference = NonNullable<CloudInitNoCloudSource['secretRef']>;
export type Condition<T extends string = string> = TypeOf<ReturnType<typeof condition<T>>>;

export type VirtualMachineInstanceSpec = TypeOf<typeof vmiSpec>;
export type VirtualMachineInstanceStatus = TypeOf<typeof vmiStatus>;

export interface VirtualMachineInstance {
  apiVersion?: typeof KUBEVIRT_API_VERSION;
  kind?: 'VirtualMachineInstance';
  metadata: ObjectMeta;
  spec: VirtualMachineInstanceSpec;
  status?: VirtualMachineInstanceStatus;
}

export type VirtualMachineSpec = TypeOf<typeof vmSpec>;
export type VirtualMachineStatus = TypeOf<typeof vmStatus>;
export type VirtualMachineStartFailure = TypeOf<typeof startFailure>;
export type VirtualMachineStateChangeRequest = NonNullable<VirtualMachineStatus['stateChangeRequests']>[number];

export interface VirtualMachine {
  apiVersion?: typeof KUBEVIRT_API_VERSION;
  kind?: 'VirtualMachine';
  metadata: ObjectMeta;
  spec: VirtualMachineSpec;
  status?: VirtualMachineStatus;
}

export type MigrationState = TypeOf<typeof migrationState>;
export type MigrationConfiguration = TypeOf<typeof migrationConfiguration>;
export type VirtualMachineInstanceMigrationSpec = TypeOf<typeof vmimSpec>;
export type VirtualMachineInstanceMigrationStatus = TypeOf<typeof vmimStatus>;

export interface VirtualMachineInstanceMigration {
  apiVersion?: typeof KUBEVIRT_API_VERSION;
  kind?: 'VirtualMachineInstanceMigration';
  metadata: ObjectMeta;
  spec: VirtualMachineInstanceMigrationSpec;
  status?: VirtualMachineInstanceMigrationStatus;
}

export type MigrationPolicySpec = TypeOf<typeof migrationPolicySpec>;

/** migrations.kubevirt.io/v1alpha1, cluster-scoped. */
export interface MigrationPolicy {
  apiVersion?: string;
  kind?: 'MigrationPolicy';
  metadata: ObjectMeta;
  spec: MigrationPolicySpec;
}

export {
  INSTANCETYPE_API_VERSION,
  INSTANCETYPE_GROUP,
  INSTANCETYPE_KINDS,
  INSTANCETYPE_VERSION,
  type InstancetypeKind,
} from '../../crds/subset/instancetype.js';

export type InstancetypeSpec = TypeOf<typeof instancetypeSpec>;
export type PreferenceSpec = TypeOf<typeof preferenceSpec>;
export type InstancetypeMatcher = NonNullable<VirtualMachineSpec['instancetype']>;
export type InstancetypeStatusRef = TypeOf<typeof statusRef>;

/** Any of the four instancetype.kubevirt.io kinds: an instancetype's spec or a preference's. */
export interface InstancetypeObject<S = InstancetypeSpec | PreferenceSpec> {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: S;
}

// The VirtualMachineInstanceReplicaSet (kubevirt.io/v1) and VirtualMachinePool
// (pool.kubevirt.io/v1alpha1) types, derived from their subset table
// (crds/subset/replicas.ts) as types.ts derives the VM's and VMI's.
import type { TypeOf } from '../../crds/subset/field.js';
import type { poolSpec, replicaStatus, vmirsSpec } from '../../crds/subset/replicas.js';
import type { KUBEVIRT_API_VERSION, ObjectMeta } from './types.js';

export {
  POOL_API_VERSION,
  POOL_GROUP,
  POOL_PLURAL,
  POOL_VERSION,
  VMIRS_PLURAL,
  type ReplicaConditionType,
  type ScaleInSortPolicy,
} from '../../crds/subset/replicas.js';

export type LabelSelector = TypeOf<typeof vmirsSpec>['selector'];
export type ReplicaStatus = TypeOf<typeof replicaStatus>;

export type VirtualMachineInstanceReplicaSetSpec = TypeOf<typeof vmirsSpec>;

export interface VirtualMachineInstanceReplicaSet {
  apiVersion?: typeof KUBEVIRT_API_VERSION;
  kind?: 'VirtualMachineInstanceReplicaSet';
  metadata: ObjectMeta;
  spec: VirtualMachineInstanceReplicaSetSpec;
  status?: ReplicaStatus;
}

export type VirtualMachinePoolSpec = TypeOf<typeof poolSpec>;

export interface VirtualMachinePool {
  apiVersion?: string;
  kind?: 'VirtualMachinePool';
  metadata: ObjectMeta;
  spec: VirtualMachinePoolSpec;
  status?: ReplicaStatus;
}

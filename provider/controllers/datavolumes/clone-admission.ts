// Whether a DataVolume's clone from another namespace was authorized: the
// kube-apiserver checked its writer's datavolumes/source grant
// (deploy/clone-source-admission.yaml) only if the policy was in force when
// the DataVolume was created, and, for one made from a VM's
// dataVolumeTemplates by the VM controller (whose own grant says nothing of
// the tenant's), when that VM was created, and the VirtualMachinePool that
// made the VM, if one did. Nothing on the object says who
// wrote it in a way its writer cannot forge (annotations, managedFields are
// the writer's), but creationTimestamp is the apiserver's: so a clone is made
// only for objects created after the policies were. A DataVolume or VM older
// than them (made while the policy was absent or removed) is refused, and is
// to be created again; so is a VM created before the policy that gains a
// cross-namespace template later (the update was checked, but this check
// cannot tell the two apart).
import type { KubeClients } from '../../kube/client.js';
import { isNotFound } from '../../kube/errors.js';
import type { DataVolume } from '../../kubevirt/datavolume-types.js';
import type { ObjectMeta } from '../../kubevirt/types.js';
import { POOL_GROUP, POOL_PLURAL, POOL_VERSION } from '../../kubevirt/replica-types.js';

export const DATAVOLUME_CLONE_POLICY = 'vkvm-datavolume-clone-source';
export const VM_CLONE_POLICY = 'vkvm-vm-clone-source';
/** How long after a policy's creation the kube-apiserver is taken to enforce it: it learns of policies by a watch. */
export const POLICY_PROPAGATION_MS = 10_000;

const timeOf = (t: ObjectMeta['creationTimestamp'] | Date | undefined): number | undefined =>
  t === undefined ? undefined : new Date(t as string | Date).getTime();

/** Pure: whether an object created at `created` was admitted under a policy in force since `policySince` (absent: none). */
export function createdUnderPolicy(created: number | undefined, policySince: number | undefined): boolean {
  return created !== undefined && policySince !== undefined && created >= policySince + POLICY_PROPAGATION_MS;
}

export class CloneAdmission {
  constructor(private readonly clients: KubeClients) {}

  /** When the policy and its binding both existed (the later creation), or undefined when either is missing. */
  private async policySince(name: string): Promise<number | undefined> {
    const read = (kind: string) =>
      this.clients.objects.read({ apiVersion: 'admissionregistration.k8s.io/v1', kind, metadata: { name } }).catch((err: unknown) => {
        if (isNotFound(err)) return undefined;
        throw err;
      });
    const [policy, binding] = await Promise.all([read('ValidatingAdmissionPolicy'), read('ValidatingAdmissionPolicyBinding')]);
    const times = [timeOf(policy?.metadata?.creationTimestamp), timeOf(binding?.metadata?.creationTimestamp)];
    return times.every((t) => t !== undefined) ? Math.max(...(times as number[])) : undefined;
  }

  /** Whether `dv` (cloning from another namespace) and the VM it was made for, if any, passed the clone-source admission. */
  async admitted(dv: DataVolume): Promise<boolean> {
    if (!createdUnderPolicy(timeOf(dv.metadata.creationTimestamp), await this.policySince(DATAVOLUME_CLONE_POLICY))) return false;
    const namespace = dv.metadata.namespace ?? 'default';
    const vm = await this.controller(dv.metadata, namespace, 'VirtualMachine', {
      group: 'kubevirt.io',
      version: 'v1',
      plural: 'virtualmachines',
    });
    if (vm === 'none') return true;
    const vmPolicySince = await this.policySince(VM_CLONE_POLICY);
    if (!vm || !createdUnderPolicy(timeOf(vm.creationTimestamp), vmPolicySince)) return false;
    const pool = await this.controller(vm, namespace, 'VirtualMachinePool', {
      group: POOL_GROUP,
      version: POOL_VERSION,
      plural: POOL_PLURAL,
    });
    return pool === 'none' || (pool !== undefined && createdUnderPolicy(timeOf(pool.creationTimestamp), vmPolicySince));
  }

  /** The metadata of `meta`'s controller of `kind`: 'none' without one, undefined when it is gone or another object of its name. */
  private async controller(
    meta: ObjectMeta,
    namespace: string,
    kind: string,
    api: { group: string; version: string; plural: string },
  ): Promise<ObjectMeta | 'none' | undefined> {
    const ref = meta.ownerReferences?.find((r) => r.controller && r.kind === kind);
    if (!ref) return 'none';
    const owner = (await this.clients.custom.getNamespacedCustomObject({ ...api, namespace, name: ref.name }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    })) as { metadata: ObjectMeta } | undefined;
    return owner?.metadata.uid === ref.uid ? owner.metadata : undefined;
  }
}

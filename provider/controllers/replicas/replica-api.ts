// The calls the replica controllers make beyond KubevirtApi's: listing
// VirtualMachineInstanceReplicaSets and VirtualMachinePools, writing their
// status, and creating, updating and deleting a pool's VMs. The untyped
// custom-objects API stays in this file.
import type { CustomObjectsApi } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import { jsonPatch } from '../../kube/client.js';
import { patchCustomObject } from '../../kube/status-patch.js';
import type { KubevirtList } from '../../kubevirt/client.js';
import {
  POOL_GROUP,
  POOL_PLURAL,
  POOL_VERSION,
  VMIRS_PLURAL,
  type VirtualMachineInstanceReplicaSet,
  type VirtualMachinePool,
} from '../../kubevirt/replica-types.js';
import { GROUP, VERSION, VM_PLURAL, type VirtualMachine } from '../../kubevirt/types.js';

const VMIRS = { group: GROUP, version: VERSION, plural: VMIRS_PLURAL };
const POOLS = { group: POOL_GROUP, version: POOL_VERSION, plural: POOL_PLURAL };
const VMS = { group: GROUP, version: VERSION, plural: VM_PLURAL };

export const VMIRS_WATCH_PATH = `/apis/${GROUP}/${VERSION}/${VMIRS_PLURAL}`;
export const POOL_WATCH_PATH = `/apis/${POOL_GROUP}/${POOL_VERSION}/${POOL_PLURAL}`;

export type ReplicaKind = 'replicaset' | 'pool';

export class ReplicaApi {
  private readonly api: CustomObjectsApi;

  constructor(clients: KubeClients) {
    this.api = clients.custom;
  }

  listReplicaSets(): Promise<KubevirtList<VirtualMachineInstanceReplicaSet>> {
    return this.api.listClusterCustomObject(VMIRS) as Promise<KubevirtList<VirtualMachineInstanceReplicaSet>>;
  }

  listPools(): Promise<KubevirtList<VirtualMachinePool>> {
    return this.api.listClusterCustomObject(POOLS) as Promise<KubevirtList<VirtualMachinePool>>;
  }

  /** Merge-patches the status, conditional on `resourceVersion` (kube/status-patch.ts). */
  patchStatus(
    kind: ReplicaKind,
    namespace: string,
    name: string,
    resourceVersion: string | undefined,
    status: Record<string, unknown>,
  ): Promise<string | undefined> {
    return patchCustomObject(this.api, kind === 'pool' ? POOLS : VMIRS, namespace, name, resourceVersion, { status });
  }

  createVm(vm: VirtualMachine): Promise<VirtualMachine> {
    return this.api.createNamespacedCustomObject({
      ...VMS,
      namespace: vm.metadata.namespace ?? 'default',
      body: vm,
    }) as Promise<VirtualMachine>;
  }

  /**
   * Replaces a VM's labels, annotations and spec with the pool's, if it is
   * still at `resourceVersion` (KubeVirt's pool updates the VM whole, too).
   */
  async replaceVmContent(
    vm: VirtualMachine,
    content: { labels: Record<string, string>; annotations: Record<string, string>; spec: VirtualMachine['spec'] },
  ): Promise<void> {
    const body = [
      { op: 'test', path: '/metadata/resourceVersion', value: vm.metadata.resourceVersion },
      { op: 'add', path: '/metadata/labels', value: content.labels },
      { op: 'add', path: '/metadata/annotations', value: content.annotations },
      { op: 'replace', path: '/spec', value: content.spec },
    ];
    await this.api.patchNamespacedCustomObject(
      { ...VMS, namespace: vm.metadata.namespace ?? 'default', name: vm.metadata.name!, body },
      jsonPatch,
    );
  }

  /** Deletes the VM if it still has this UID; foreground, so the VM goes after its VMI (as KubeVirt's pool). */
  async deleteVm(namespace: string, name: string, uid: string): Promise<void> {
    await this.api.deleteNamespacedCustomObject({
      ...VMS,
      namespace,
      name,
      body: { preconditions: { uid }, propagationPolicy: 'Foreground' },
    });
  }
}

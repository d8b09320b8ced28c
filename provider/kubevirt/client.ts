// The kubevirt.io/v1 resources through client-node's CustomObjectsApi: typed
// wrappers for the calls the controllers make, so the untyped `any` of the
// custom-objects API stays in this file.
import type { CustomObjectsApi } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { jsonPatch, mergePatch } from '../kube/client.js';
import { patchCustomObject } from '../kube/status-patch.js';
import {
  GROUP,
  MIGRATION_POLICY_PLURAL,
  MIGRATIONS_GROUP,
  MIGRATIONS_VERSION,
  VERSION,
  VM_PLURAL,
  VMI_PLURAL,
  VMIM_PLURAL,
  type MigrationPolicy,
  type VirtualMachine,
  type VirtualMachineInstance,
  type VirtualMachineInstanceMigration,
} from './types.js';

export type KubevirtPlural = typeof VM_PLURAL | typeof VMI_PLURAL | typeof VMIM_PLURAL;

/** The path ListWatch watches for a plural, across namespaces or in one. */
export const watchPath = (plural: KubevirtPlural, namespace?: string): string =>
  namespace ? `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${plural}` : `/apis/${GROUP}/${VERSION}/${plural}`;
/** What an operator does when the cluster lacks the kubevirt.io resources vkvm serves. */
export const CRDS_MISSING_HINT = "vkvm's kubevirt.io CRDs are not installed (kubectl apply -f deploy/crds.yaml; vkvm up installs them)";

export interface KubevirtList<T> {
  metadata?: { resourceVersion?: string };
  items: T[];
}

export type JsonPatchOp = { op: 'add' | 'replace' | 'test'; path: string; value: unknown } | { op: 'remove'; path: string };

export class KubevirtApi {
  private readonly api: CustomObjectsApi;

  constructor(clients: KubeClients) {
    this.api = clients.custom;
  }

  listVms(): Promise<KubevirtList<VirtualMachine>> {
    return this.api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: VM_PLURAL }) as Promise<KubevirtList<VirtualMachine>>;
  }

  listVmis(): Promise<KubevirtList<VirtualMachineInstance>> {
    return this.api.listClusterCustomObject({ group: GROUP, version: VERSION, plural: VMI_PLURAL }) as Promise<
      KubevirtList<VirtualMachineInstance>
    >;
  }

  listVmims(namespace?: string): Promise<KubevirtList<VirtualMachineInstanceMigration>> {
    const where = { group: GROUP, version: VERSION, plural: VMIM_PLURAL };
    return (namespace ? this.api.listNamespacedCustomObject({ ...where, namespace }) : this.api.listClusterCustomObject(where)) as Promise<
      KubevirtList<VirtualMachineInstanceMigration>
    >;
  }

  createVmim(vmim: VirtualMachineInstanceMigration, dryRun = false): Promise<VirtualMachineInstanceMigration> {
    return this.api.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: vmim.metadata.namespace ?? 'default',
      plural: VMIM_PLURAL,
      body: vmim,
      ...(dryRun ? { dryRun: 'All' } : {}),
    }) as Promise<VirtualMachineInstanceMigration>;
  }

  /** Deletes the VMIM only if it still has this UID; its finalizer keeps it until the migration controller lets go. */
  async deleteVmim(namespace: string, name: string, uid: string): Promise<void> {
    await this.api.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: VMIM_PLURAL,
      name,
      body: { preconditions: { uid } },
    });
  }

  /** The cluster's MigrationPolicies (migrations.kubevirt.io, cluster-scoped). */
  listMigrationPolicies(): Promise<KubevirtList<MigrationPolicy>> {
    return this.api.listClusterCustomObject({
      group: MIGRATIONS_GROUP,
      version: MIGRATIONS_VERSION,
      plural: MIGRATION_POLICY_PLURAL,
    }) as Promise<KubevirtList<MigrationPolicy>>;
  }

  /** The one VMI of that name, as a list (what a watch of it starts from). */
  listVmiNamed(namespace: string, name: string): Promise<KubevirtList<VirtualMachineInstance>> {
    const fieldSelector = `metadata.name=${name}`;
    return this.api.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: VMI_PLURAL, fieldSelector }) as Promise<
      KubevirtList<VirtualMachineInstance>
    >;
  }

  createVmi(vmi: VirtualMachineInstance): Promise<VirtualMachineInstance> {
    const namespace = vmi.metadata.namespace ?? 'default';
    return this.api.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: VMI_PLURAL,
      body: vmi,
    }) as Promise<VirtualMachineInstance>;
  }

  /** Deletes the VMI only if it still has this UID (a precondition, so a newer VMI of the same name is never hit). */
  async deleteVmi(namespace: string, name: string, uid: string): Promise<void> {
    await this.api.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: VMI_PLURAL,
      name,
      body: { preconditions: { uid } },
    });
  }

  getVm(namespace: string, name: string): Promise<VirtualMachine> {
    return this.api.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: VM_PLURAL,
      name,
    }) as Promise<VirtualMachine>;
  }

  getVmi(namespace: string, name: string): Promise<VirtualMachineInstance> {
    return this.api.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: VMI_PLURAL,
      name,
    }) as Promise<VirtualMachineInstance>;
  }

  /** A merge patch of the object (spec, metadata); `dryRun` validates without persisting. */
  async patch(plural: KubevirtPlural, namespace: string, name: string, body: Record<string, unknown>, dryRun = false): Promise<void> {
    await this.api.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace, plural, name, body, ...(dryRun ? { dryRun: 'All' } : {}) },
      mergePatch,
    );
  }

  /** A JSON patch (RFC 6902, `test` operations included) of the status subresource. */
  async jsonPatchStatus(plural: KubevirtPlural, namespace: string, name: string, ops: JsonPatchOp[], dryRun = false): Promise<void> {
    await this.api.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace, plural, name, body: ops, ...(dryRun ? { dryRun: 'All' } : {}) },
      jsonPatch,
    );
  }

  /**
   * Merge-patches `spec`, conditional on `resourceVersion` as patchStatus is.
   * Returns the new resourceVersion.
   */
  patchSpec(
    plural: KubevirtPlural,
    namespace: string,
    name: string,
    resourceVersion: string | undefined,
    spec: Record<string, unknown>,
  ): Promise<string | undefined> {
    return patchCustomObject(this.api, { group: GROUP, version: VERSION, plural }, namespace, name, resourceVersion, { spec });
  }

  /** Merge-patches `status` through the status subresource, conditional on `resourceVersion` (kube/status-patch.ts patchCustomObject). */
  patchStatus(
    plural: KubevirtPlural,
    namespace: string,
    name: string,
    resourceVersion: string | undefined,
    status: Record<string, unknown>,
  ): Promise<string | undefined> {
    return patchCustomObject(this.api, { group: GROUP, version: VERSION, plural }, namespace, name, resourceVersion, { status });
  }
}

// The VirtualMachineInstanceReplicaSet controller (KubeVirt's
// virt-controller replicaset loop): keeps `replicas` VMIs of the set's
// template, controlled by the set, and writes the set's status (its one
// writer). Handlers only enqueue the set's `ns/name`; syncReplicaSet reads
// the caches, acts (replicaset-plan.ts decides) and is idempotent. While a
// create or delete of the set's is not yet in the VMI cache it does not
// scale (expectations.ts), so a sync that outruns its own watch events never
// overshoots. Events are KubeVirt's (virtualmachinereplicaset-controller).
import type { Logger } from '../../log.js';
import { objectReference, type EventRecorder } from '../../kube/events.js';
import { apiMessage, isConflict, isNotFound } from '../../kube/errors.js';
import { QueuedController } from '../queued-controller.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../../kube/informer.js';
import { statusPatch } from '../../kube/status-patch.js';
import type { KubevirtApi } from '../../kubevirt/client.js';
import type { VirtualMachineInstanceReplicaSet } from '../../kubevirt/replica-types.js';
import { KUBEVIRT_API_VERSION, type VirtualMachineInstance } from '../../kubevirt/types.js';
import { WrittenVersions } from '../written-versions.js';
import { Expectations, type CacheView } from './expectations.js';
import type { ReplicaApi } from './replica-api.js';
import { isActive, isReady, planReplicaSet, vmiForReplicaSet, vmisOf } from './replicaset-plan.js';
import { nextReplicaStatus, pauseEvent, REPLICA_STATUS_FIELDS, REPLICASET_PAUSED, type ReplicaFailure } from './replica-status.js';

export interface ReplicaSetControllerOptions {
  api: ReplicaApi;
  kubevirt: KubevirtApi;
  replicaSets: ClusterInformer<VirtualMachineInstanceReplicaSet>;
  vmis: ClusterInformer<VirtualMachineInstance>;
  events: EventRecorder;
  workers?: number;
  log: Logger;
  now?: () => Date;
}

/** The apiserver's own words (`exceeded quota: ...`), as KubeVirt's conditions and events carry them. */
const message = apiMessage;

/** How UIDs stand among `objects` (one namespace's, from a cache). */
export function cacheView(objects: readonly { metadata: { uid?: string; deletionTimestamp?: string } }[]): CacheView {
  const byUid = new Map(objects.map((o) => [o.metadata.uid, o]));
  return (uid) => {
    const o = byUid.get(uid);
    return !o ? 'absent' : o.metadata.deletionTimestamp ? 'deleting' : 'present';
  };
}

/** The controller of a kind that an object names, as a key. */
export function controllerKey(
  obj: { metadata: { namespace?: string; ownerReferences?: { controller?: boolean; kind: string; name: string }[] } },
  kind: string,
): string | undefined {
  const ref = obj.metadata.ownerReferences?.find((r) => r.controller && r.kind === kind);
  return ref ? objectKey(obj.metadata.namespace ?? 'default', ref.name) : undefined;
}

export class ReplicaSetController extends QueuedController {
  private readonly written = new WrittenVersions();
  private readonly expectations = new Expectations();
  private readonly now: () => Date;

  constructor(private readonly o: ReplicaSetControllerOptions) {
    super({
      name: 'syncReplicaSetsFromKubernetes',
      workers: o.workers ?? 4,
      log: o.log,
    });
    this.now = o.now ?? (() => new Date());
    o.replicaSets.onChange((rs) => this.enqueue(keyOfObject(rs)));
    o.vmis.onChange((vmi) => {
      const key = controllerKey(vmi, 'VirtualMachineInstanceReplicaSet');
      if (key) this.enqueue(key);
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncReplicaSet(key);
  }

  protected ownedKeys(): string[] {
    return this.o.replicaSets.list().map(keyOfObject);
  }

  async syncReplicaSet(key: string): Promise<void> {
    const rs = this.o.replicaSets.get(key);
    if (!rs) return this.expectations.forget(key);
    if (this.written.stale(key, rs)) return;
    const namespace = rs.metadata.namespace ?? 'default';
    const log = this.o.log.child({ replicaset: key, uid: rs.metadata.uid });
    const inNamespace = this.o.vmis.list().filter((v) => (v.metadata.namespace ?? 'default') === namespace);
    const owned = vmisOf(rs, inNamespace);
    const nowMs = this.now().getTime();
    const mayScale = this.expectations.satisfied(key, cacheView(inNamespace), nowMs);
    const plan = mayScale ? planReplicaSet(rs, owned) : { create: 0, delete: [], cleanUp: [], active: owned.filter(isActive) };
    const ref = objectReference({ ...rs, apiVersion: KUBEVIRT_API_VERSION, kind: 'VirtualMachineInstanceReplicaSet' });

    let failure: ReplicaFailure | undefined;
    let error: unknown;
    const creates = Array.from({ length: plan.create }, async () => {
      try {
        const vmi = await this.o.kubevirt.createVmi(vmiForReplicaSet(rs));
        this.expectations.created(key, vmi.metadata.uid!, nowMs);
        this.o.events.recordFor(
          ref,
          'Normal',
          'SuccessfulCreate',
          `Started the virtual machine by creating the new virtual machine instance ${vmi.metadata.name}`,
        );
      } catch (err) {
        error ??= err;
        failure ??= { reason: 'FailedCreate', message: message(err) };
        this.o.events.recordFor(ref, 'Warning', 'FailedCreate', `Error creating virtual machine instance: ${message(err)}`);
      }
    });
    const deletes = (vmis: VirtualMachineInstance[], said: (vmi: VirtualMachineInstance) => string) =>
      vmis.map(async (vmi) => {
        try {
          await this.o.kubevirt.deleteVmi(namespace, vmi.metadata.name!, vmi.metadata.uid!);
          this.expectations.deleted(key, vmi.metadata.uid!, nowMs);
          this.o.events.recordFor(ref, 'Normal', 'SuccessfulDelete', said(vmi));
        } catch (err) {
          if (isNotFound(err) || isConflict(err)) return; // gone already, or replaced
          error ??= err;
          failure ??= { reason: 'FailedDelete', message: message(err) };
          this.o.events.recordFor(
            ref,
            'Warning',
            'FailedDelete',
            `Error deleting virtual machine instance ${vmi.metadata.name}: ${message(err)}`,
          );
        }
      });
    await Promise.all([
      ...creates,
      ...deletes(plan.delete, (vmi) => `Stopped the virtual machine by deleting the virtual machine instance ${vmi.metadata.uid}`),
    ]);
    if (plan.create || plan.delete.length) log.info({ created: plan.create, deleted: plan.delete.map((v) => v.metadata.name) }, 'scaled');
    // Finished VMIs go once their replacements are asked for (KubeVirt's cleanFinishedVmis).
    if (!failure) await Promise.all(deletes(plan.cleanUp, (vmi) => `Deleted finished virtual machine: ${vmi.metadata.uid}`));

    const next = nextReplicaStatus({
      current: rs.status,
      selector: rs.spec.selector,
      paused: Boolean(rs.spec.paused),
      pausedWording: REPLICASET_PAUSED,
      replicas: plan.active.length,
      readyReplicas: plan.active.filter(isReady).length,
      ...(failure ? { failure } : {}),
      now: this.now(),
    });
    const patch = statusPatch(rs.status, next, REPLICA_STATUS_FIELDS);
    if (patch) {
      try {
        this.written.record(
          key,
          await this.o.api.patchStatus('replicaset', namespace, rs.metadata.name!, rs.metadata.resourceVersion, patch),
        );
        const pause = pauseEvent(rs.status, next);
        if (pause === 'paused') this.o.events.recordFor(ref, 'Normal', 'SuccessfulPaused', 'Paused');
        if (pause === 'resumed') this.o.events.recordFor(ref, 'Normal', 'SuccessfulResumed', 'Resumed');
      } catch (err) {
        // Changed since the cache read it (its watch event requeues the key), or deleted.
        if (!isConflict(err) && !isNotFound(err)) throw err;
      }
    }
    if (error) throw error;
  }
}

// The DataVolume controller (CDI's datavolume controllers, for the sources
// vkvm serves): each DataVolume gets one claim of its name, controlled by it
// (claim-plan.ts decides its spec and annotations), and a status mirrored from
// that claim and what the node's import reports on it (status-plan.ts). It is
// the only writer of DataVolume status. Handlers only enqueue `ns/name`; a
// sync reads the caches and is idempotent: a claim that exists is never
// changed, a second create is AlreadyExists. The claim goes with its
// DataVolume through the ownerReference (garbage collector). A clone from
// another namespace is made only if it passed admission (clone-admission.ts),
// through a staging claim there (cross-namespace-clone.ts), deleted with it.
// A StorageClass that appears or changes requeues the DataVolumes whose
// claims name it: one waiting on a missing class (a manifest's
// `storageClassName: local`) leaves Pending once an administrator makes the
// class, as CDI's does.
import type { V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import type { Logger } from '../../log.js';
import type { KubeClients } from '../../kube/client.js';
import { objectReference, type EventRecorder } from '../../kube/events.js';
import { apiMessage, isConflict, isNotFound } from '../../kube/errors.js';
import { keyOfObject, objectKey, type ClusterInformer } from '../../kube/informer.js';
import { patchCustomObject, statusPatch } from '../../kube/status-patch.js';
import { CDI_API_VERSION, CDI_GROUP, CDI_VERSION, DATAVOLUME_PLURAL, type DataVolume } from '../../kubevirt/datavolume-types.js';
import { QueuedController } from '../queued-controller.js';
import { WrittenVersions } from '../written-versions.js';
import { cloneSourceNamespace, clonesFromAnotherNamespace, CLONE_FOR_ANNOTATION, planClaim, stagingClaimName } from './claim-plan.js';
import { CloneAdmission } from './clone-admission.js';
import { deleteStagingClaimsOf, syncCrossNamespaceClone, type CrossNamespaceClone } from './cross-namespace-clone.js';
import { DATAVOLUME_STATUS_FIELDS, nextDataVolumeStatus } from './status-plan.js';

export const DATAVOLUMES = { group: CDI_GROUP, version: CDI_VERSION, plural: DATAVOLUME_PLURAL };
export const DATAVOLUME_WATCH_PATH = `/apis/${CDI_GROUP}/${CDI_VERSION}/${DATAVOLUME_PLURAL}`;

export interface DataVolumeControllerOptions {
  clients: KubeClients;
  dataVolumes: ClusterInformer<DataVolume>;
  claims: ClusterInformer<V1PersistentVolumeClaim>;
  /** Its events only requeue DataVolumes; a sync reads the class itself. */
  storageClasses: ClusterInformer<V1StorageClass>;
  events: EventRecorder;
  workers?: number;
  /** How soon a clone waiting for its volume to appear looks again (MISSING_VOLUME_RESYNC_MS). */
  missingVolumeResyncMs?: number;
  log: Logger;
  now?: () => Date;
}

/** How soon a clone waiting for its volume to appear looks again. */
export const MISSING_VOLUME_RESYNC_MS = 10_000;

const controllerUid = (claim: V1PersistentVolumeClaim): string | undefined =>
  claim.metadata?.ownerReferences?.find((r) => r.controller && r.kind === 'DataVolume')?.uid;

export class DataVolumeController extends QueuedController {
  private readonly written = new WrittenVersions();
  private readonly now: () => Date;
  private readonly cloneAdmission: CloneAdmission;

  constructor(private readonly o: DataVolumeControllerOptions) {
    super({ name: 'syncDataVolumesFromKubernetes', workers: o.workers ?? 2, log: o.log });
    this.now = o.now ?? (() => new Date());
    this.cloneAdmission = new CloneAdmission(o.clients);
    o.dataVolumes.onChange((dv) => this.enqueue(keyOfObject(dv)));
    o.claims.onChange((claim) => {
      const namespace = claim.metadata?.namespace ?? 'default';
      const owner = claim.metadata?.ownerReferences?.find((r) => r.controller && r.kind === 'DataVolume');
      if (owner) this.enqueue(objectKey(namespace, owner.name));
      const stagedFor = claim.metadata?.annotations?.[CLONE_FOR_ANNOTATION];
      if (stagedFor) this.enqueue(stagedFor);
      // DataVolumes waiting to clone this claim.
      for (const dv of o.dataVolumes.list()) {
        if (cloneSourceNamespace(dv) === namespace && dv.spec.source?.pvc?.name === claim.metadata?.name) this.enqueue(keyOfObject(dv));
      }
    });
    o.storageClasses.onChange((sc) => {
      for (const dv of o.dataVolumes.list()) {
        const claim = o.claims.get(keyOfObject(dv));
        if (claim?.spec?.storageClassName === sc.metadata?.name) this.enqueue(keyOfObject(dv));
      }
    });
  }

  protected sync(key: string): Promise<void> {
    return this.syncDataVolume(key);
  }

  protected ownedKeys(): string[] {
    return this.o.dataVolumes.list().map(keyOfObject);
  }

  /** What a Pending claim's class says of its wait: WaitForFirstConsumer, or a class that is not there. */
  private async pendingClass(
    claim: V1PersistentVolumeClaim | undefined,
  ): Promise<{ waitForFirstConsumer: boolean; missingStorageClass?: string }> {
    const name = claim?.spec?.storageClassName;
    if (!name || (claim.status?.phase && claim.status.phase !== 'Pending')) return { waitForFirstConsumer: false };
    const sc = await this.o.clients.storage.readStorageClass({ name }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    if (!sc) return { waitForFirstConsumer: false, missingStorageClass: name };
    return { waitForFirstConsumer: sc.volumeBindingMode === 'WaitForFirstConsumer' };
  }

  async syncDataVolume(key: string): Promise<void> {
    const dv = this.o.dataVolumes.get(key);
    if (!dv) return deleteStagingClaimsOf(this.o, key);
    if (dv.metadata.deletionTimestamp) return;
    if (this.written.stale(key, dv)) return;
    const namespace = dv.metadata.namespace ?? 'default';
    const log = this.o.log.child({ datavolume: key, uid: dv.metadata.uid });
    const cached = this.o.claims.get(key);
    const foreignClaim = Boolean(cached && controllerUid(cached) !== dv.metadata.uid);
    let claim = cached && !foreignClaim ? cached : undefined;

    const sourceName = dv.spec.source?.pvc?.name;
    const sourceNamespace = cloneSourceNamespace(dv);
    const source = sourceName ? this.o.claims.get(objectKey(sourceNamespace, sourceName)) : undefined;
    const sourcePv = source?.spec?.volumeName
      ? await this.o.clients.core.readPersistentVolume({ name: source.spec.volumeName }).catch((err: unknown) => {
          if (isNotFound(err)) return undefined;
          throw err;
        })
      : undefined;
    // Asked until the DataVolume's own claim exists: decided then, and a policy re-applied later does not undo a made clone.
    const crossNamespace = clonesFromAnotherNamespace(dv);
    const cloneAdmitted = crossNamespace ? Boolean(claim) || (await this.cloneAdmission.admitted(dv)) : undefined;
    // A staging claim of an earlier DataVolume of this name (deleted and made again before its delete was synced).
    if (crossNamespace) await deleteStagingClaimsOf(this.o, key, stagingClaimName(dv));
    const plan = planClaim({
      dv,
      ...(source ? { source } : {}),
      ...(sourcePv ? { sourcePv } : {}),
      ...(cloneAdmitted !== undefined ? { cloneAdmitted } : {}),
    });
    const ref = objectReference({ ...dv, apiVersion: CDI_API_VERSION, kind: 'DataVolume' });

    let clone: CrossNamespaceClone | undefined;
    if (plan.kind === 'claim' && plan.staging && !foreignClaim) {
      clone = await syncCrossNamespaceClone(this.o, { claim: plan.claim, staging: plan.staging }, claim).catch((err: unknown) => {
        // Told to the DataVolume's owner as the same-namespace path does (a quota refusal, a staging claim not vkvm's); retried.
        this.o.events.recordFor(ref, 'Warning', 'ErrClaimNotValid', `Error cloning into PVC ${dv.metadata.name}: ${apiMessage(err)}`);
        throw err;
      });
      claim = clone.kind === 'staging' ? undefined : clone.claim;
    } else if (plan.kind === 'claim' && !cached) {
      try {
        claim = await this.o.clients.core.createNamespacedPersistentVolumeClaim({ namespace, body: plan.claim });
        log.info({ storageClass: claim.spec?.storageClassName, selectedNode: plan.claim.metadata?.annotations }, 'created the claim');
      } catch (err) {
        // Made by an earlier sync the cache does not show yet: its watch event brings the key back.
        if (isConflict(err)) return;
        this.o.events.recordFor(ref, 'Warning', 'ErrClaimNotValid', `Error creating PVC ${dv.metadata.name}: ${apiMessage(err)}`);
        throw err;
      }
    }

    const { status, events } = nextDataVolumeStatus({
      dv,
      plan,
      ...(claim ? { claim } : {}),
      foreignClaim,
      ...(clone?.kind === 'staging' && clone.staging ? { staging: clone.staging } : {}),
      ...(clone?.kind === 'failed' ? { cloneFailure: clone.why } : {}),
      ...(clone?.kind === 'claim' && clone.missingVolume ? { cloneVolumeMissing: clone.missingVolume } : {}),
      ...(await this.pendingClass(claim)),
      now: this.now(),
    });
    // No watch on volumes: a clone waiting for its volume is synced again until the volume is there (level-triggered).
    if (clone?.kind === 'claim' && clone.missingVolume) this.enqueueAfter(key, this.o.missingVolumeResyncMs ?? MISSING_VOLUME_RESYNC_MS);
    const patch = statusPatch(dv.status, status, DATAVOLUME_STATUS_FIELDS);
    if (!patch) return;
    try {
      const rv = await patchCustomObject(this.o.clients.custom, DATAVOLUMES, namespace, dv.metadata.name!, dv.metadata.resourceVersion, {
        status: patch,
      });
      this.written.record(key, rv);
      if (patch.phase) log.info({ phase: status.phase, progress: status.progress }, 'DataVolume phase changed');
      // Recorded once the status that caused them is written, so a conflict's retry does not repeat them.
      for (const e of events) this.o.events.recordFor(ref, e.type, e.reason, e.message);
    } catch (err) {
      // Changed since the cache read it (its watch event requeues the key), or deleted.
      if (!isConflict(err) && !isNotFound(err)) throw err;
    }
  }
}

// A clone from another namespace, made as CDI makes one where a claim cannot
// name a source elsewhere: the staging claim (claim-plan.ts) clones the
// source in its own namespace through the CSI driver's clone (the same path
// as a clone within a namespace); once it is bound, the DataVolume's claim is
// created naming that volume, the volume's claimRef is moved to it, and the
// staging claim is deleted. One idempotent step a sync, read from the world:
// the DataVolume's claim exists or not, the staging claim is bound or not,
// the volume's claimRef names which claim. No reclaim-policy change is needed:
// the claimRef moves only once the new claim exists, and the PV controller
// confirms a claim missing from its cache with the API before releasing a volume.
// The staging claim deleted (or replaced) before the move fails the clone: the
// PV controller releases its volume, which then never comes to the claim.
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { KubeClients } from '../../kube/client.js';
import { mergePatch } from '../../kube/client.js';
import { isConflict, isNotFound } from '../../kube/errors.js';
import { objectKey, type ClusterInformer } from '../../kube/informer.js';
import type { Logger } from '../../log.js';
import { CLONE_FOR_ANNOTATION } from './claim-plan.js';

export interface CrossNamespaceCloneOptions {
  clients: KubeClients;
  claims: ClusterInformer<V1PersistentVolumeClaim>;
  log: Logger;
}

const keyOf = (c: V1PersistentVolumeClaim) => objectKey(c.metadata!.namespace!, c.metadata!.name!);

/**
 * Whether `staging` is the claim vkvm made: annotated for this DataVolume, cloning the planned source, and bound
 * to the volume provisioned for it (`pvc-<its uid>`), not one a user of the source namespace made or bound.
 */
function isOurs(staging: V1PersistentVolumeClaim, planned: V1PersistentVolumeClaim): boolean {
  return (
    staging.metadata?.annotations?.[CLONE_FOR_ANNOTATION] === planned.metadata?.annotations?.[CLONE_FOR_ANNOTATION] &&
    staging.spec?.dataSource?.kind === 'PersistentVolumeClaim' &&
    staging.spec.dataSource.name === planned.spec?.dataSource?.name &&
    staging.spec?.volumeName === `pvc-${staging.metadata?.uid}`
  );
}

/** Where a clone from another namespace stands after a step. */
export type CrossNamespaceClone =
  /** The DataVolume's claim is not made yet: the staging claim (once the cache shows it) is being filled. */
  | { kind: 'staging'; staging?: V1PersistentVolumeClaim }
  /**
   * The DataVolume's claim exists, bound to the cloned volume or about to be;
   * `missingVolume`: the volume it names is not found (yet), so it waits.
   */
  | { kind: 'claim'; claim: V1PersistentVolumeClaim; missingVolume?: string }
  /** It cannot go on: the claim names a volume that will not move to it (`why`). */
  | { kind: 'failed'; claim: V1PersistentVolumeClaim; why: string };

/** One step of the clone. */
export async function syncCrossNamespaceClone(
  o: CrossNamespaceCloneOptions,
  plan: { claim: V1PersistentVolumeClaim; staging: V1PersistentVolumeClaim },
  existing: V1PersistentVolumeClaim | undefined,
): Promise<CrossNamespaceClone> {
  const { core } = o.clients;
  const stagingAt = { namespace: plan.staging.metadata!.namespace!, name: plan.staging.metadata!.name! };
  const staging = o.claims.get(keyOf(plan.staging));
  let claim = existing;
  if (!claim) {
    if (!staging) {
      await core.createNamespacedPersistentVolumeClaim({ namespace: stagingAt.namespace, body: plan.staging }).catch((err: unknown) => {
        if (!isConflict(err)) throw err;
      });
      o.log.info({ staging: keyOf(plan.staging) }, 'created the staging claim of a clone from another namespace');
      return { kind: 'staging' };
    }
    if (staging.status?.phase !== 'Bound') return { kind: 'staging', staging };
    if (!isOurs(staging, plan.staging))
      throw new Error(
        `claim ${keyOf(plan.staging)} is not the staging claim vkvm made for this clone; delete it to let the clone start again`,
      );
    try {
      claim = await core.createNamespacedPersistentVolumeClaim({
        namespace: plan.claim.metadata!.namespace!,
        body: { ...plan.claim, spec: { ...plan.claim.spec, volumeName: staging.spec!.volumeName! } },
      });
    } catch (err) {
      // Made by an earlier sync the cache does not show yet: its watch event brings the key back.
      if (isConflict(err)) return { kind: 'staging', staging };
      throw err;
    }
    o.log.info({ volume: claim.spec?.volumeName }, 'created the claim for the cloned volume');
  }
  const volumeName = claim.spec?.volumeName;
  if (claim.status?.phase !== 'Bound' && volumeName) {
    const pv = await core.readPersistentVolume({ name: volumeName }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    const movedHere = pv?.spec?.claimRef?.uid === claim.metadata?.uid;
    if (!movedHere && (!staging || !isOurs(staging, plan.staging))) {
      // Only vkvm's staging claim holds the volume until the move: without it the PV controller releases
      // (and deletes) the volume, and this claim would stay Pending with nothing to say why.
      const what = staging ? 'replaced by a claim vkvm did not make' : 'deleted';
      const why = `the staging claim ${keyOf(plan.staging)} was ${what} before its volume ${volumeName} moved to this claim; delete the DataVolume and create it again to clone again`;
      return { kind: 'failed', claim, why };
    }
    // Ours still holds it: the volume is not in the API server's view yet (or not any more); said, and synced again until it is.
    if (!pv) return { kind: 'claim', claim, missingVolume: volumeName };
    if (pv && staging && pv.spec?.claimRef?.uid === staging.metadata?.uid) {
      const c = claim.metadata!;
      await core.patchPersistentVolume(
        {
          name: volumeName,
          body: {
            // Moved only from the claimRef read above: a change since is a conflict, retried.
            metadata: { resourceVersion: pv.metadata?.resourceVersion },
            spec: {
              claimRef: {
                apiVersion: 'v1',
                kind: 'PersistentVolumeClaim',
                namespace: c.namespace,
                name: c.name,
                uid: c.uid,
                resourceVersion: null,
              },
            },
          },
        },
        mergePatch,
      );
      o.log.info({ volume: volumeName }, 'moved the cloned volume to the claim');
    }
  }
  if (claim.status?.phase === 'Bound' && staging) await deleteClaim(o.clients, stagingAt);
  return { kind: 'claim', claim };
}

/** The staging claims left by DataVolume `key`'s clones but `keep` (its current one), deleted (unbound or not, nothing else owns them). */
export async function deleteStagingClaimsOf(o: CrossNamespaceCloneOptions, key: string, keep?: string): Promise<void> {
  for (const c of o.claims.list()) {
    if (c.metadata?.annotations?.[CLONE_FOR_ANNOTATION] === key && c.metadata.name?.startsWith('vkvm-clone-') && c.metadata.name !== keep)
      await deleteClaim(o.clients, { namespace: c.metadata.namespace!, name: c.metadata.name });
  }
}

async function deleteClaim(clients: KubeClients, at: { namespace: string; name: string }): Promise<void> {
  await clients.core.deleteNamespacedPersistentVolumeClaim(at).catch((err: unknown) => {
    if (!isNotFound(err)) throw err;
  });
}

// What the node writes on a claim about its import: who holds the import
// (claim, a write preconditioned on the claim's resourceVersion, so of two
// nodes that read the same claim exactly one writes it) and the reports
// (phase, progress, failure) in its status, in order. The shapes are
// provider/kubevirt/datavolume-report.ts; the import itself volume-import.ts.
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { strategicMerge, type KubeClients } from '../kube/client.js';
import { isConflict } from '../kube/errors.js';
import type { Logger } from '../log.js';
import type { ImportPhase } from '../kubevirt/datavolume-annotations.js';
import { importCondition, importerCondition, importerOf, importReportOf } from '../kubevirt/datavolume-report.js';
import type { ClaimDisk } from './import-plan.js';

/**
 * How long a Running import of another node may go unreported before this
 * node may take it over (that node died or lost the volume); the holder
 * reports at least every HEARTBEAT_MS while it imports.
 */
export const IMPORT_STALE_MS = 5 * 60_000;
export const HEARTBEAT_MS = 60_000;
/**
 * The holder stops its import once no report of its own has reached the API
 * server for this long: well before IMPORT_STALE_MS, so a node cut off from
 * the API server is no longer writing when another node may take over.
 */
export const IMPORT_FENCE_MS = IMPORT_STALE_MS / 2;

/** Who holds a claim's import, as this node reads it. */
export type Holder = { kind: 'free' } | { kind: 'self' } | { kind: 'other'; node: string };

/**
 * Another node holds the import while its report says Running and was
 * written within IMPORT_STALE_MS; only a volume published on many nodes at
 * once can have two importers (a single-node volume is on one node at a time).
 */
export function holderOf(pvc: V1PersistentVolumeClaim, nodeName: string, multiNode: boolean, now: Date): Holder {
  const importer = importerOf(pvc.status?.conditions);
  if (!importer) return { kind: 'free' };
  if (importer.node === nodeName) return { kind: 'self' };
  const running = importReportOf(pvc.status?.conditions)?.phase === 'Running';
  const fresh = importer.reportedAt !== undefined && now.getTime() - importer.reportedAt.getTime() < IMPORT_STALE_MS;
  return multiNode && running && fresh ? { kind: 'other', node: importer.node } : { kind: 'free' };
}

export class ImportReports {
  /** The last report sent on each claim: reports go one after another, so a late progress never follows Succeeded. */
  private readonly reports = new Map<string, Promise<void>>();

  constructor(
    private readonly o: { nodeName: string; clients: Pick<KubeClients, 'core'> },
    private readonly now: () => Date = () => new Date(),
  ) {}

  /**
   * Takes the claim's import for this node: Running 0.00% and this node as
   * the importer, in one patch that the API server applies only if the claim
   * is still at `resourceVersion` (the NodeRestriction plugin ignores the
   * resourceVersion when it checks that a node changed conditions alone).
   * False when the claim changed since: read it again and decide again.
   */
  async claim(c: ClaimDisk, resourceVersion: string | undefined): Promise<boolean> {
    const now = this.now();
    const body = {
      metadata: { resourceVersion },
      status: { conditions: [importCondition('Running', 0, undefined, now), importerCondition(this.o.nodeName, now)] },
    };
    try {
      await this.o.clients.core.patchNamespacedPersistentVolumeClaimStatus({ name: c.claim, namespace: c.namespace, body }, strategicMerge);
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  /**
   * Best effort: the import is the node's job and the report only mirrors
   * it, so a refused report is a warning; except a Block volume's Succeeded
   * (`mustReach`), which is its completion record: refused, the import fails
   * and the next start imports again. A strategic merge on the status
   * subresource replaces this one condition (merge key: type) and leaves the
   * importer's and the resize conditions alone. True when it reached the API.
   */
  report(
    c: ClaimDisk,
    phase: ImportPhase,
    percent: number,
    log: Logger,
    message?: string,
    o: { mustReach?: boolean } = {},
  ): Promise<boolean> {
    const key = `${c.namespace}/${c.claim}`;
    const sent = (this.reports.get(key) ?? Promise.resolve()).then(() => this.send(c, phase, percent, log, message, o.mustReach));
    // The queue goes on after a refused completion record; its caller gets the refusal.
    const queued = sent.then(
      () => undefined,
      () => undefined,
    );
    this.reports.set(key, queued);
    void queued.finally(() => this.reports.get(key) === queued && this.reports.delete(key));
    return sent;
  }

  private async send(
    c: ClaimDisk,
    phase: ImportPhase,
    percent: number,
    log: Logger,
    message?: string,
    mustReach = false,
  ): Promise<boolean> {
    const body = { status: { conditions: [importCondition(phase, percent, message, this.now())] } };
    try {
      await this.o.clients.core.patchNamespacedPersistentVolumeClaimStatus({ name: c.claim, namespace: c.namespace, body }, strategicMerge);
      return true;
    } catch (err) {
      if (mustReach)
        throw new Error(`the import's completion could not be recorded on the claim: ${(err as Error).message}`, { cause: err });
      log.warn({ err, phase }, 'could not report the import on the claim');
      return false;
    }
  }
}

// How the node reports a DataVolume import on its claim, and how the
// DataVolume controller reads it back, pure. The report cannot be claim
// annotations (datavolume-annotations.ts's IMPORT_PHASE/PROGRESS/MESSAGE):
// the NodeRestriction admission plugin lets a node write a claim only
// through its status subresource, and there only status.conditions, whatever
// RBAC grants. So the
// node writes one condition, and the Node authorizer already limits that
// write to the claims of pods bound to the node; no grant is added.
//
//   type    vkvm.io/DataVolumeImport
//   status  Unknown (Running), True (Succeeded), False (Failed)
//   reason  the phase: Running | Succeeded | Failed (CDI's storage.pod.phase values)
//   message the progress as CDI shows it ("45.20%") unless Failed; the reason when Failed
//
// Beside it, the node that holds the import (an RWX claim can be published on
// two nodes at once, and only one may write it), written with the first
// Running report in one patch preconditioned on the claim's resourceVersion:
//
//   type    vkvm.io/DataVolumeImporter
//   status  True; reason Claimed; message the node's name
import type { V1PersistentVolumeClaimCondition } from '@kubernetes/client-node';
import { IMPORT_PHASES, type ImportPhase } from './datavolume-annotations.js';

export const IMPORT_CONDITION_TYPE = 'vkvm.io/DataVolumeImport';
export const IMPORTER_CONDITION_TYPE = 'vkvm.io/DataVolumeImporter';

/** The claim's field a Failed report begins with when the image does not fit; the DataVolume controller names its own field for it. */
export const CLAIM_SIZE_FIELD = 'spec.resources.requests.storage';

/** What the node reports: the three values of the annotation contract. */
export interface ImportReport {
  phase: ImportPhase;
  /** "45.20%"; "0.00%" when Failed. */
  progress: string;
  /** Why it failed; absent otherwise. */
  message?: string;
}

/** A progress figure as CDI shows it: two decimals and a percent sign. */
export const formatProgress = (percent: number): string => `${Math.min(100, Math.max(0, percent)).toFixed(2)}%`;

const STATUS: Record<ImportPhase, string> = { Running: 'Unknown', Succeeded: 'True', Failed: 'False' };

export function importCondition(
  phase: ImportPhase,
  percent: number,
  message: string | undefined,
  now: Date,
): V1PersistentVolumeClaimCondition {
  return {
    type: IMPORT_CONDITION_TYPE,
    status: STATUS[phase],
    reason: phase,
    message: phase === 'Failed' ? (message ?? '') : formatProgress(percent),
    lastTransitionTime: now,
  };
}

/** The node's report in a claim's conditions, or undefined when there is none. */
export function importReportOf(conditions: readonly V1PersistentVolumeClaimCondition[] | undefined): ImportReport | undefined {
  const c = conditions?.find((x) => x.type === IMPORT_CONDITION_TYPE);
  const phase = IMPORT_PHASES.find((p) => p === c?.reason);
  if (!c || !phase) return undefined;
  return phase === 'Failed'
    ? { phase, progress: formatProgress(0), message: c.message ?? '' }
    : { phase, progress: c.message ?? formatProgress(0) };
}

/** The condition naming the node that holds the claim's import. */
export function importerCondition(nodeName: string, now: Date): V1PersistentVolumeClaimCondition {
  return { type: IMPORTER_CONDITION_TYPE, status: 'True', reason: 'Claimed', message: nodeName, lastTransitionTime: now };
}

/** The node holding the claim's import, and when its report was last written (its heartbeat), if any. */
export function importerOf(
  conditions: readonly V1PersistentVolumeClaimCondition[] | undefined,
): { node: string; reportedAt?: Date } | undefined {
  const node = conditions?.find((x) => x.type === IMPORTER_CONDITION_TYPE)?.message;
  if (!node) return undefined;
  const at = conditions?.find((x) => x.type === IMPORT_CONDITION_TYPE)?.lastTransitionTime;
  return { node, ...(at ? { reportedAt: new Date(at) } : {}) };
}

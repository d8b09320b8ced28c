// A DataVolume's status and the Events that go with a change of it, as CDI's
// DataVolume controller derives them (controller-base.go updateStatus,
// import-controller.go and pvc-clone-controller.go updateStatusPhase,
// conditions.go), from the DataVolume, its claim, and what the node's import
// reports on the claim (provider/kubevirt/datavolume-report.ts). The phase
// is an ordered table: the first row that holds wins, Unknown is the fallback.
// Pure; the controller is the only writer of DataVolume status.
import type { V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { findCondition, setCondition, type ConditionInput } from '../../kubevirt/conditions.js';
import { CLAIM_SIZE_FIELD, importReportOf, type ImportReport } from '../../kubevirt/datavolume-report.js';
import type { DataVolume, DataVolumeConditionType, DataVolumePhase, DataVolumeStatus } from '../../kubevirt/datavolume-types.js';
import type { EventType } from '../../kube/events.js';
import { cloneSourceNamespace, SELECTED_NODE_ANNOTATION, sourceKind, type ClaimPlan } from './claim-plan.js';

export interface DataVolumeEvent {
  type: EventType;
  reason: string;
  message: string;
}

export interface StatusInput {
  dv: DataVolume;
  /** What the DataVolume asks for (planClaim). */
  plan: ClaimPlan;
  /** The DataVolume's claim (same name), when it exists and is controlled by the DataVolume. */
  claim?: V1PersistentVolumeClaim;
  /** A claim of that name exists and is not the DataVolume's. */
  foreignClaim?: boolean;
  /** A clone from another namespace whose claim is not made yet: its staging claim there, being filled. */
  staging?: V1PersistentVolumeClaim;
  /** Why a clone from another namespace cannot go on (cross-namespace-clone.ts); its claim would stay Pending. */
  cloneFailure?: string;
  /** The volume a clone from another namespace moves to its claim, not found (yet): the claim waits Pending for it. */
  cloneVolumeMissing?: string;
  /** The claim's StorageClass binds WaitForFirstConsumer. */
  waitForFirstConsumer: boolean;
  /** The StorageClass the claim names does not exist: it waits Pending until an administrator makes it. */
  missingStorageClass?: string;
  now: Date;
}

interface Facts {
  kind: ReturnType<typeof sourceKind>;
  claim?: V1PersistentVolumeClaim;
  claimPhase: string;
  importPhase: ImportReport['phase'] | undefined;
  /** What the node reported of the import on the claim (its vkvm.io/DataVolumeImport condition). */
  report?: ImportReport;
  input: StatusInput;
}

const PROGRESS_DONE = '100.0%';
const PROGRESS_UNKNOWN = 'N/A';
const isImport = (f: Facts) => f.kind === 'http' || f.kind === 'registry';
const isClone = (f: Facts) => f.kind === 'pvc';
const selectedNode = (f: Facts) => Boolean(f.claim?.metadata?.annotations?.[SELECTED_NODE_ANNOTATION]);
/** The staging claim is bound, or its node is chosen (the CSI driver there is copying): CDI's clone is running. */
const stagingCopying = (f: Facts) =>
  f.input.staging?.status?.phase === 'Bound' || Boolean(f.input.staging?.metadata?.annotations?.[SELECTED_NODE_ANNOTATION]);
/** A Pending claim that names its volume: the copy is made (from another namespace: the volume is moving to it). */
const namesItsVolume = (f: Facts) => Boolean(f.claim?.spec?.volumeName);

/** CDI's phases for vkvm's sources, in precedence order. */
export const PHASE_ROWS: ReadonlyArray<{ phase: DataVolumePhase; when: (f: Facts) => boolean }> = [
  { phase: 'Failed', when: (f) => f.input.plan.kind === 'refused' || f.input.cloneFailure !== undefined || f.claimPhase === 'Lost' },
  { phase: 'CloneInProgress', when: (f) => !f.claim && stagingCopying(f) },
  { phase: 'CloneScheduled', when: (f) => !f.claim && Boolean(f.input.staging) },
  { phase: 'Pending', when: (f) => !f.claim },
  { phase: 'Failed', when: (f) => isImport(f) && f.importPhase === 'Failed' },
  { phase: 'Succeeded', when: (f) => isImport(f) && f.importPhase === 'Succeeded' },
  { phase: 'ImportInProgress', when: (f) => isImport(f) && f.importPhase === 'Running' },
  { phase: 'CloneInProgress', when: (f) => isClone(f) && f.claimPhase === 'Pending' && (selectedNode(f) || namesItsVolume(f)) },
  { phase: 'CloneScheduled', when: (f) => isClone(f) && f.claimPhase === 'Pending' },
  { phase: 'WaitForFirstConsumer', when: (f) => f.claimPhase === 'Pending' && f.input.waitForFirstConsumer && !selectedNode(f) },
  { phase: 'Pending', when: (f) => f.claimPhase === 'Pending' },
  { phase: 'ImportScheduled', when: (f) => isImport(f) && f.claimPhase === 'Bound' },
  { phase: 'Succeeded', when: (f) => f.claimPhase === 'Bound' },
];

function factsOf(input: StatusInput): Facts {
  const claim = input.claim;
  const report = inDataVolumeTerms(importReportOf(claim?.status?.conditions), input.dv);
  const importPhase = report?.phase;
  // A claim just created may come back without a phase yet: Kubernetes' default is Pending.
  const claimPhase = claim ? claim.status?.phase || 'Pending' : '';
  return { kind: sourceKind(input.dv), ...(claim ? { claim } : {}), claimPhase, importPhase, ...(report ? { report } : {}), input };
}

function progressOf(f: Facts, phase: DataVolumePhase): string {
  if (phase === 'Succeeded') return PROGRESS_DONE;
  if (phase === 'ImportInProgress') return f.report?.progress ?? PROGRESS_UNKNOWN;
  return PROGRESS_UNKNOWN;
}

/** The Bound condition: the claim's phase, or why there is no claim (CDI: the event's reason and message). */
function boundCondition(f: Facts): ConditionInput<DataVolumeConditionType> {
  const { plan } = f.input;
  const name = f.input.dv.metadata.name ?? '';
  if (plan.kind === 'refused') return { type: 'Bound', status: 'False', reason: 'ErrClaimNotValid', message: refusalMessage(plan.refusal) };
  if (f.input.cloneFailure) return { type: 'Bound', status: 'False', reason: 'ErrClaimNotValid', message: f.input.cloneFailure };
  if (f.input.foreignClaim)
    return {
      type: 'Bound',
      status: 'False',
      reason: 'ErrResourceExists',
      message: `Resource "${name}" already exists and is not managed by DataVolume`,
    };
  if (!f.claim) {
    if (plan.kind === 'waitForSource') return { type: 'Bound', status: 'False', reason: plan.reason, message: plan.message };
    return { type: 'Bound', status: 'False', reason: 'NotFound', message: 'No PVC found' };
  }
  if (f.claimPhase === 'Bound') return { type: 'Bound', status: 'True', reason: 'Bound', message: `PVC ${name} Bound` };
  if (f.claimPhase === 'Lost') return { type: 'Bound', status: 'False', reason: 'ClaimLost', message: 'Claim Lost' };
  if (f.input.cloneVolumeMissing)
    return {
      type: 'Bound',
      status: 'False',
      reason: 'VolumeNotFound',
      message: `PersistentVolume ${f.input.cloneVolumeMissing}, cloned for PVC ${name}, is not found; PVC ${name} stays Pending until it exists`,
    };
  if (f.input.missingStorageClass)
    return {
      type: 'Bound',
      status: 'False',
      reason: 'StorageClassNotFound',
      message: `${storageClassField(f.input.dv)}: StorageClass "${f.input.missingStorageClass}" not found; PVC ${name} stays Pending until it exists`,
    };
  return { type: 'Bound', status: 'False', reason: 'Pending', message: `PVC ${name} Pending` };
}

/**
 * The node's report names the claim's own fields (it sees only the claim); a
 * DataVolume's user wrote the claim's size in spec.storage or spec.pvc, so a
 * failure naming the claim's size names that field instead.
 */
function inDataVolumeTerms(report: ImportReport | undefined, dv: DataVolume): ImportReport | undefined {
  if (!report?.message?.startsWith(`${CLAIM_SIZE_FIELD}:`)) return report;
  const field = dv.spec.pvc ? 'spec.pvc.resources.requests.storage' : 'spec.storage.resources.requests.storage';
  return { ...report, message: field + report.message.slice(CLAIM_SIZE_FIELD.length) };
}

/** The field a DataVolume names its class in, as the user wrote it. */
const storageClassField = (dv: DataVolume): string => (dv.spec.pvc ? 'spec.pvc.storageClassName' : 'spec.storage.storageClassName');

function runningCondition(f: Facts, phase: DataVolumePhase): ConditionInput<DataVolumeConditionType> {
  const message = f.report?.message;
  if (phase === 'ImportInProgress') return { type: 'Running', status: 'True', ...(message ? { message } : {}) };
  if (phase === 'Succeeded') return { type: 'Running', status: 'False', reason: 'Completed' };
  if (phase === 'Failed' && f.importPhase === 'Failed')
    return { type: 'Running', status: 'False', reason: 'Error', ...(message ? { message } : {}) };
  return { type: 'Running', status: 'False' };
}

function readyCondition(f: Facts, phase: DataVolumePhase): ConditionInput<DataVolumeConditionType> {
  const { plan } = f.input;
  if (phase === 'Succeeded') return { type: 'Ready', status: 'True' };
  if (phase === 'Unknown') return { type: 'Ready', status: 'Unknown' };
  if (plan.kind === 'refused') return { type: 'Ready', status: 'False', reason: 'ErrClaimNotValid', message: refusalMessage(plan.refusal) };
  if (f.input.cloneFailure) return { type: 'Ready', status: 'False', reason: 'ErrClaimNotValid', message: f.input.cloneFailure };
  if (phase === 'Failed' && f.importPhase === 'Failed') {
    const message = f.report?.message ?? 'the import failed';
    return { type: 'Ready', status: 'False', reason: 'ImportFailed', message };
  }
  if (phase === 'ImportInProgress') return { type: 'Ready', status: 'False', reason: 'TransferRunning' };
  return { type: 'Ready', status: 'False' };
}

export const refusalMessage = (r: { field: string; message: string }): string => `${r.field}: ${r.message}`;

/** CDI's event for entering `phase`, if it records one. */
function phaseEvent(f: Facts, phase: DataVolumePhase): DataVolumeEvent | undefined {
  const { dv, plan } = f.input;
  const name = dv.metadata.name ?? '';
  const namespace = dv.metadata.namespace ?? 'default';
  const from = `${cloneSourceNamespace(dv)}/${dv.spec.source?.pvc?.name ?? ''}`;
  const into = `${namespace}/${name}`;
  if (plan.kind === 'refused') return { type: 'Warning', reason: 'ErrClaimNotValid', message: refusalMessage(plan.refusal) };
  // As the controller's Warning for a clone that cannot go on now (a quota refusal): this one cannot go on at all.
  if (f.input.cloneFailure)
    return { type: 'Warning', reason: 'ErrClaimNotValid', message: `Error cloning into PVC ${name}: ${f.input.cloneFailure}` };
  if (f.claimPhase === 'Lost') return { type: 'Warning', reason: 'ErrClaimLost', message: `PVC ${name} lost` };
  switch (phase) {
    case 'ImportScheduled':
      return { type: 'Normal', reason: 'ImportScheduled', message: `Import into ${name} scheduled` };
    case 'ImportInProgress':
      return { type: 'Normal', reason: 'ImportInProgress', message: `Import into ${name} in progress` };
    case 'CloneScheduled':
      return { type: 'Normal', reason: 'CloneScheduled', message: `Cloning from ${from} into ${into} scheduled` };
    case 'CloneInProgress':
      return { type: 'Normal', reason: 'CloneInProgress', message: `Cloning from ${from} into ${into} in progress` };
    case 'Failed':
      return { type: 'Warning', reason: 'ImportFailed', message: `Failed to import into PVC ${name}` };
    case 'Succeeded':
      return isClone(f)
        ? { type: 'Normal', reason: 'CloneSucceeded', message: `Successfully cloned from ${from} into ${into}` }
        : { type: 'Normal', reason: 'ImportSucceeded', message: `Successfully imported into PVC ${name}` };
    default:
      return undefined;
  }
}

/** The DataVolume's status after this sync, and the Events its changes record (CDI's: on a phase or Bound change). */
export function nextDataVolumeStatus(input: StatusInput): { status: DataVolumeStatus; events: DataVolumeEvent[] } {
  const f = factsOf(input);
  const current = input.dv.status ?? {};
  const phase = PHASE_ROWS.find((row) => row.when(f))?.phase ?? 'Unknown';
  let conditions = current.conditions ?? [];
  const bound = boundCondition(f);
  const beforeBound = findCondition(conditions, 'Bound');
  conditions = setCondition(conditions, bound, input.now);
  conditions = setCondition(conditions, readyCondition(f, phase), input.now);
  conditions = setCondition(conditions, runningCondition(f, phase), input.now);
  const events: DataVolumeEvent[] = [];
  const boundChanged =
    !beforeBound || beforeBound.status !== bound.status || beforeBound.reason !== bound.reason || beforeBound.message !== bound.message;
  // A claim of the name that is not the DataVolume's is CDI's Warning; a refusal and a failed clone have their own (phaseEvent).
  if (boundChanged && bound.reason && bound.message && input.plan.kind !== 'refused' && !input.cloneFailure)
    events.push({
      type: input.foreignClaim || input.missingStorageClass || input.cloneVolumeMissing ? 'Warning' : 'Normal',
      reason: bound.reason,
      message: bound.message,
    });
  if (phase !== current.phase) {
    const event = phaseEvent(f, phase);
    if (event) events.push(event);
  }
  const status: DataVolumeStatus = {
    ...current,
    phase,
    progress: progressOf(f, phase),
    ...(f.claim ? { claimName: f.claim.metadata?.name ?? '' } : {}),
    conditions,
  };
  return { status, events };
}

/** The status fields this controller owns. */
export const DATAVOLUME_STATUS_FIELDS = ['phase', 'progress', 'claimName', 'conditions'] as const;

// A VirtualMachine's decisions and printable status, pure functions of the
// VM, its current VMI and the time, following KubeVirt's VM controller
// (pkg/virt-controller/watch/vm/vm.go): syncRunStrategy for what to do with
// the VMI, syncStartFailureStatus / calculateStartBackoffTime for the
// crash-loop back-off, and setPrintableStatus for the STATUS column.
//
// The controller that uses these owns the bookkeeping KubeVirt keeps in the
// VM's status: status.runStrategy is set to runStrategyOf(vm) after each sync,
// status.startFailure to nextStartFailure(...), and when it deletes a VMI for
// which restartsAfterDelete(...) holds it appends a Start request to
// status.stateChangeRequests (KubeVirt's addStartRequest), which is how
// RerunOnFailure remembers to start again once the failed VMI is gone.
import type {
  PrintableStatus,
  RunStrategy,
  VirtualMachine,
  VirtualMachineInstance,
  VirtualMachineStartFailure,
  VirtualMachineStatus,
} from '../kubevirt/types.js';
import { RUN_STRATEGIES } from '../kubevirt/types.js';

/** KubeVirt's defaultMaxCrashLoopBackoffDelaySeconds. */
export const START_BACKOFF_MAX_S = 300;
/** KubeVirt's minimum back-off interval. */
export const START_BACKOFF_MIN_S = 10;

/** What the VM controller should do with the VM's VMI. */
export type VmiAction = 'create' | 'delete' | 'keep';

/**
 * The VM's run strategy: runStrategy, or the deprecated running (true is
 * Always, false is Halted); neither means Halted. Undefined when both are set
 * (KubeVirt: "running and runstrategy are mutually exclusive") or the value
 * is unknown; the controller then acts on nothing and reports the error.
 */
export function runStrategyOf(vm: VirtualMachine): RunStrategy | undefined {
  const { running, runStrategy } = vm.spec ?? {};
  if (running != null && runStrategy != null) return undefined;
  if (running != null) return running ? 'Always' : 'Halted';
  if (runStrategy == null) return 'Halted';
  return RUN_STRATEGIES.includes(runStrategy) ? runStrategy : undefined;
}

export const isFinal = (vmi: VirtualMachineInstance | undefined): boolean =>
  vmi?.status?.phase === 'Succeeded' || vmi?.status?.phase === 'Failed';
const isDeleting = (obj: { metadata: { deletionTimestamp?: string } } | undefined): boolean => Boolean(obj?.metadata.deletionTimestamp);

/** The first state-change request is a Start (virtctl start). */
export function hasStartRequest(vm: VirtualMachine): boolean {
  return vm.status?.stateChangeRequests?.[0]?.action === 'Start';
}

/** The first state-change request stops this VMI (virtctl stop / restart). */
export function hasStopRequestFor(vm: VirtualMachine, vmi: VirtualMachineInstance): boolean {
  const request = vm.status?.stateChangeRequests?.[0];
  return request?.action === 'Stop' && request.uid !== undefined && request.uid === vmi.metadata.uid;
}

/** The VMI reached Running at some point (KubeVirt looks at its phase transitions). */
export function everRan(vmi: VirtualMachineInstance | undefined): boolean {
  return Boolean(vmi?.status?.phaseTransitionTimestamps?.some((t) => t.phase === 'Running'));
}

/**
 * Seconds to wait before starting again after `failCount` consecutive start
 * failures: KubeVirt's calculateStartBackoffTime, 10 s × failCount² plus up to
 * half that again at random, capped at 5 minutes (10-15 s, 40-60 s, 90-135 s,
 * 160-240 s, then 300 s). `jitter` in [0, 1) stands in for rand.Intn so the
 * result is a function of its inputs.
 */
export function startBackoffS(failCount: number, jitter: number): number {
  const interval = Math.max(Math.floor(START_BACKOFF_MAX_S / 30), START_BACKOFF_MIN_S);
  const delay = interval * Math.max(1, failCount) ** 2;
  const extra = Math.floor(Math.min(Math.max(jitter, 0), 0.999999) * (Math.floor(delay / 2) + 1));
  return Math.min(delay + extra, START_BACKOFF_MAX_S);
}

/** Milliseconds left before a failed VM may start again; 0 when it may start now. */
export function startBackoffRemainingMs(vm: VirtualMachine, now: Date): number {
  const retryAfter = vm.status?.startFailure?.retryAfterTimestamp;
  if (!retryAfter) return 0;
  return Math.max(0, Date.parse(retryAfter) - now.getTime());
}

const RESTARTING: ReadonlySet<RunStrategy> = new Set(['Always', 'RerunOnFailure', 'Once']);

/**
 * The VM's next status.startFailure (KubeVirt's syncStartFailureStatus):
 * cleared once a VMI ran or when the strategy does not restart VMIs; a VMI
 * that ended without ever running counts one more failure (once per VMI) and
 * sets the time before which the next start waits.
 */
export function nextStartFailure(
  vm: VirtualMachine,
  vmi: VirtualMachineInstance | undefined,
  now: Date,
  jitter: number,
): VirtualMachineStartFailure | undefined {
  const strategy = runStrategyOf(vm);
  const current = vm.status?.startFailure;
  if (everRan(vmi) || (strategy !== undefined && !RESTARTING.has(strategy))) return undefined;
  if (!vmi || !isFinal(vmi)) return current;
  if (current?.lastFailedVMIUID === vmi.metadata.uid) return current;
  const count = (current?.consecutiveFailCount ?? 0) + 1;
  const retryAfter = new Date(now.getTime() + startBackoffS(count, jitter) * 1000);
  return { consecutiveFailCount: count, lastFailedVMIUID: vmi.metadata.uid, retryAfterTimestamp: retryAfter.toISOString() };
}

/**
 * What to do with the VMI (KubeVirt's syncRunStrategy). 'delete' of a VMI
 * already being deleted is 'keep'. 'keep' while a start waits out the
 * back-off: requeue after startBackoffRemainingMs.
 *
 *   Always          running: keep; ended, or a Stop request for it: delete
 *                   (and start a new one on a later sync); none: create
 *   RerunOnFailure  ended (either way), or stopped: delete; none: create when
 *                   a Start request is pending or the strategy just changed
 *   Manual          a Stop request for it: delete; none and a Start request: create
 *   Halted          any VMI: delete (a Start request here makes KubeVirt
 *                   switch the VM to Always, a spec change left to the caller)
 *   Once            none: create; never restarted
 *
 * A VM being deleted only deletes its VMI.
 */
export function desiredVmi(vm: VirtualMachine, vmi: VirtualMachineInstance | undefined, now: Date): VmiAction {
  const stop = (): VmiAction => (vmi && !isDeleting(vmi) ? 'delete' : 'keep');
  if (isDeleting(vm)) return stop();
  const strategy = runStrategyOf(vm);
  const mayStart = startBackoffRemainingMs(vm, now) === 0;
  switch (strategy) {
    case 'Always':
      if (vmi) return hasStopRequestFor(vm, vmi) || isFinal(vmi) ? stop() : 'keep';
      return mayStart ? 'create' : 'keep';
    case 'RerunOnFailure':
      if (vmi) return hasStopRequestFor(vm, vmi) || isFinal(vmi) ? stop() : 'keep';
      if (!hasStartRequest(vm) && vm.status?.runStrategy === 'RerunOnFailure') return 'keep';
      return mayStart ? 'create' : 'keep';
    case 'Manual':
      if (vmi) return hasStopRequestFor(vm, vmi) ? stop() : 'keep';
      return hasStartRequest(vm) ? 'create' : 'keep';
    case 'Halted':
      // A Start request (virtctl start --paused) switches the VM to Always first: see haltedStartSpec.
      return stop();
    case 'Once':
      return vmi ? 'keep' : 'create';
    default:
      return 'keep';
  }
}

/** Deleting this VMI should be followed by a new one: RerunOnFailure after a failure (KubeVirt adds a Start request). */
export function restartsAfterDelete(vm: VirtualMachine, vmi: VirtualMachineInstance): boolean {
  return runStrategyOf(vm) === 'RerunOnFailure' && vmi.status?.phase === 'Failed' && !isDeleting(vmi) && !hasStopRequestFor(vm, vmi);
}

/** KubeVirt's isSetToStart: the run strategy wants a VMI running now. */
export function isSetToStart(vm: VirtualMachine, vmi: VirtualMachineInstance | undefined): boolean {
  switch (runStrategyOf(vm)) {
    case 'Always':
      return true;
    case 'Manual':
      return vmi ? !hasStopRequestFor(vm, vmi) : hasStartRequest(vm);
    case 'RerunOnFailure':
      return vmi ? vmi.status?.phase !== 'Succeeded' : true;
    case 'Once':
      return !vmi;
    default:
      return false;
  }
}

export interface VmStatusInput {
  vm: VirtualMachine;
  /** The VM's VMI (same namespace and name), if one exists. */
  vmi?: VirtualMachineInstance;
  now: Date;
  /**
   * The controller created a VMI its cache does not show yet (KubeVirt's
   * creation expectation). Defaults to: there is no VMI and desiredVmi says create.
   */
  startExpected?: boolean;
  /** The controller deleted the VMI and has not seen it go. Defaults to: desiredVmi says delete. */
  stopExpected?: boolean;
  /** A PVC the template's volumes name is not bound yet. */
  unboundClaims?: boolean;
  /** The VM's DataVolumes (dataVolumeTemplates) are not ready for a VMI yet, or one failed. */
  dataVolumes?: 'provisioning' | 'failed';
}

/** The input with its defaults applied: what each row reads. */
export interface VmStatusFacts {
  vm: VirtualMachine;
  vmi?: VirtualMachineInstance;
  strategy?: RunStrategy;
  startExpected: boolean;
  stopExpected: boolean;
  unboundClaims: boolean;
  dataVolumes?: 'provisioning' | 'failed';
}

function vmiCondition(vmi: VirtualMachineInstance | undefined, type: string, status: string, reason?: string): boolean {
  return Boolean(
    vmi?.status?.conditions?.some((c) => c.type === type && c.status === status && (reason === undefined || c.reason === reason)),
  );
}
const paused = (f: VmStatusFacts) => vmiCondition(f.vmi, 'Paused', 'True');
const phase = (f: VmStatusFacts) => f.vmi?.status?.phase ?? '';

/**
 * KubeVirt's setPrintableStatus table, in its order; the first row that holds
 * wins and Unknown is the fallback. Left out, because vkvm has nothing that
 * could make it true:
 *   Migrating                (after Stopping)   vkvm does not live-migrate
 * The image pull rows read the VMI's Synchronized condition, as KubeVirt's
 * do, so the VMI controller sets reason ErrImagePull / ImagePullBackOff
 * (or FailedPvcNotFound) there when it cannot fetch an image (or find a claim).
 */
export const PRINTABLE_STATUS_ROWS: ReadonlyArray<{ status: PrintableStatus; when: (f: VmStatusFacts) => boolean }> = [
  { status: 'Terminating', when: (f) => isDeleting(f.vm) },
  { status: 'Stopping', when: (f) => Boolean(f.vmi) && !isFinal(f.vmi) && (isDeleting(f.vmi) || f.stopExpected) },
  { status: 'Paused', when: (f) => phase(f) === 'Running' && paused(f) },
  { status: 'Running', when: (f) => phase(f) === 'Running' && !paused(f) },
  { status: 'ErrorPvcNotFound', when: (f) => vmiCondition(f.vmi, 'Synchronized', 'False', 'FailedPvcNotFound') },
  { status: 'DataVolumeError', when: (f) => !f.vmi && f.dataVolumes === 'failed' },
  { status: 'ErrorUnschedulable', when: (f) => vmiCondition(f.vmi, 'PodScheduled', 'False', 'Unschedulable') },
  { status: 'Provisioning', when: (f) => !f.vmi && f.dataVolumes === 'provisioning' && isSetToStart(f.vm, f.vmi) },
  { status: 'WaitingForVolumeBinding', when: (f) => f.unboundClaims && isSetToStart(f.vm, f.vmi) },
  { status: 'ErrImagePull', when: (f) => vmiCondition(f.vmi, 'Synchronized', 'False', 'ErrImagePull') },
  { status: 'ImagePullBackOff', when: (f) => vmiCondition(f.vmi, 'Synchronized', 'False', 'ImagePullBackOff') },
  {
    status: 'Starting',
    when: (f) => (f.vmi ? ['', 'Pending', 'Scheduling', 'Scheduled'].includes(phase(f)) : f.startExpected),
  },
  {
    status: 'CrashLoopBackOff',
    when: (f) =>
      (!f.vmi || isFinal(f.vmi)) &&
      !f.startExpected &&
      (f.vm.status?.startFailure?.consecutiveFailCount ?? 0) > 0 &&
      f.strategy !== undefined &&
      RESTARTING.has(f.strategy),
  },
  { status: 'Stopped', when: (f) => (f.vmi ? isFinal(f.vmi) : !f.startExpected) },
];

export function vmStatusFacts(i: VmStatusInput): VmStatusFacts {
  const desired = desiredVmi(i.vm, i.vmi, i.now);
  const facts: VmStatusFacts = {
    vm: i.vm,
    startExpected: i.startExpected ?? (!i.vmi && desired === 'create'),
    stopExpected: i.stopExpected ?? desired === 'delete',
    unboundClaims: i.unboundClaims ?? false,
    ...(i.dataVolumes ? { dataVolumes: i.dataVolumes } : {}),
  };
  const strategy = runStrategyOf(i.vm);
  if (i.vmi) facts.vmi = i.vmi;
  if (strategy) facts.strategy = strategy;
  return facts;
}

export function derivePrintableStatus(i: VmStatusInput): PrintableStatus {
  const facts = vmStatusFacts(i);
  return PRINTABLE_STATUS_ROWS.find((row) => row.when(facts))?.status ?? 'Unknown';
}

/** The status fields derived from the VM and its VMI (conditions and startFailure are the controller's). */
export function deriveVmStatus(i: VmStatusInput): Pick<VirtualMachineStatus, 'printableStatus' | 'created' | 'ready' | 'runStrategy'> {
  const strategy = runStrategyOf(i.vm);
  return {
    printableStatus: derivePrintableStatus(i),
    created: Boolean(i.vmi),
    ready: Boolean(i.vmi) && vmiCondition(i.vmi, 'Ready', 'True'),
    ...(strategy ? { runStrategy: strategy } : {}),
  };
}

/**
 * The spec patch that starts a Halted VM holding a Start request (virtctl
 * start --paused sends one instead of changing the spec, so the request's
 * data reaches the VMI): KubeVirt's VM controller sets runStrategy Always, or
 * running true on a VM that uses running. Undefined when there is nothing to do.
 */
export function haltedStartSpec(
  vm: VirtualMachine,
  vmi: VirtualMachineInstance | undefined,
): { runStrategy: 'Always' } | { running: true } | undefined {
  if (isDeleting(vm) || vmi || runStrategyOf(vm) !== 'Halted' || !hasStartRequest(vm)) return undefined;
  return vm.spec.running != null ? { running: true } : { runStrategy: 'Always' };
}

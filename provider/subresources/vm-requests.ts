// What virtctl start, stop and restart change on a VirtualMachine, decided as
// KubeVirt's virt-api decides it (pkg/virt-api/rest/subresource.go,
// StartVMRequestHandler and its siblings): a spec patch (runStrategy or
// running) for the strategies the spec expresses, a state-change request on
// the VM's status for the others, which the VM controller serves
// (vm-status.ts), or KubeVirt's error for a transition that makes no sense.
// Pure: the route does the reads and writes.
import type { JsonPatchOp } from '../kubevirt/client.js';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineStateChangeRequest } from '../kubevirt/types.js';
import { isFinal, runStrategyOf } from '../controllers/vm-status.js';
import { conflict, StatusError, badRequest } from './errors.js';

export type VmChange =
  /** A merge patch of the VM (its run strategy). */
  | { kind: 'spec'; patch: Record<string, unknown> }
  /** A JSON patch of the VM's status (state-change requests). */
  | { kind: 'status'; ops: JsonPatchOp[] };

export interface StartOptions {
  paused?: boolean;
}
export interface StopOptions {
  gracePeriod?: number;
}
export interface RestartOptions {
  gracePeriodSeconds?: number;
}

const internal = (message: string) => new StatusError('InternalError', `Internal error occurred: ${message}`);

function strategy(vm: VirtualMachine) {
  const s = runStrategyOf(vm);
  if (!s) throw internal('running and runstrategy are mutually exclusive, or the runStrategy is unknown');
  return s;
}

/** The VMI is running in KubeVirt's sense for start: it exists, has a phase, and has not ended. */
const active = (vmi: VirtualMachineInstance | undefined): boolean =>
  Boolean(vmi && !isFinal(vmi) && vmi.status?.phase && vmi.status.phase !== 'Unknown');

/**
 * KubeVirt's getChangeRequestJson: add the requests when there are none; a
 * lone Stop replaces pending ones; anything else while requests are pending is
 * refused. The test operation makes a concurrent change a 409, not a lost update.
 */
export function changeRequestOps(vm: VirtualMachine, changes: VirtualMachineStateChangeRequest[]): JsonPatchOp[] {
  const status = vm.status ?? {};
  const ops: JsonPatchOp[] = [];
  const pending = status.stateChangeRequests ?? [];
  if (Object.keys(status).length === 0) ops.push({ op: 'add', path: '/status', value: { stateChangeRequests: changes } });
  else if (pending.length === 0) ops.push({ op: 'add', path: '/status/stateChangeRequests', value: changes });
  else if (changes.length === 1 && changes[0]!.action === 'Stop') {
    ops.push(
      { op: 'test', path: '/status/stateChangeRequests', value: pending },
      { op: 'replace', path: '/status/stateChangeRequests', value: changes },
    );
  } else throw internal('unable to complete request: stop/start already underway');
  if (status.startFailure) ops.push({ op: 'remove', path: '/status/startFailure' });
  return ops;
}

/** spec.runStrategy when the VM uses it, else the deprecated spec.running. */
function runningPatch(vm: VirtualMachine, running: boolean): VmChange {
  return { kind: 'spec', patch: { spec: vm.spec.runStrategy != null ? { runStrategy: running ? 'Always' : 'Halted' } : { running } } };
}

export function startChange(vm: VirtualMachine, vmi: VirtualMachineInstance | undefined, opts: StartOptions): VmChange {
  const name = vm.metadata.name!;
  if (active(vmi)) throw conflict('virtualmachine', name, 'VM is already running');
  const start: VirtualMachineStateChangeRequest = { action: 'Start', ...(opts.paused ? { data: { paused: 'true' } } : {}) };
  const s = strategy(vm);
  switch (s) {
    case 'Halted':
      // A paused start goes through the controller, which carries the request's data to the VMI.
      return opts.paused ? { kind: 'status', ops: changeRequestOps(vm, [start]) } : runningPatch(vm, true);
    case 'RerunOnFailure':
    case 'Manual': {
      if (s === 'RerunOnFailure' && vmi?.status?.phase === 'Failed')
        throw conflict('virtualmachine', name, 'RerunOnFailure does not support starting VM from failed state');
      const ended = s === 'Manual' ? isFinal(vmi) : vmi?.status?.phase === 'Succeeded';
      const requests: VirtualMachineStateChangeRequest[] = ended && vmi ? [{ action: 'Stop', uid: vmi.metadata.uid! }, start] : [start];
      return { kind: 'status', ops: changeRequestOps(vm, requests) };
    }
    case 'Always':
    case 'Once':
      throw conflict('virtualmachine', name, `${s} does not support manual start requests`);
  }
}

export function stopChange(vm: VirtualMachine, vmi: VirtualMachineInstance | undefined, opts: StopOptions): VmChange {
  const name = vm.metadata.name!;
  const running = Boolean(vmi && !isFinal(vmi));
  const s = strategy(vm);
  const stopRequest = (): VmChange => ({ kind: 'status', ops: changeRequestOps(vm, [{ action: 'Stop', uid: vmi!.metadata.uid! }]) });
  switch (s) {
    case 'Halted': {
      if (!running) throw conflict('virtualmachine', name, 'VM is not running');
      const old = vmi!.spec.terminationGracePeriodSeconds;
      if (opts.gracePeriod === undefined || (old !== undefined && opts.gracePeriod >= old)) {
        throw conflict('virtualmachine', name, 'Halted only supports manual stop requests with a shorter graceperiod');
      }
      return stopRequest();
    }
    case 'RerunOnFailure':
    case 'Manual':
      if (!running) throw conflict('virtualmachine', name, 'VM is not running');
      return stopRequest();
    case 'Always':
    case 'Once':
      return runningPatch(vm, false);
  }
}

/** Restart stops the current VMI and starts a new one (a new UID): a Stop for it, then a Start. */
export function restartChange(vm: VirtualMachine, vmi: VirtualMachineInstance | undefined): VmChange {
  const name = vm.metadata.name!;
  const s = strategy(vm);
  // KubeVirt's own spelling ("RunStategy"): scripts match on it.
  if (s === 'Halted' || s === 'Once') throw conflict('virtualmachine', name, `RunStategy ${s} does not support manual restart requests`);
  if (!vmi) throw conflict('virtualmachine', name, 'VM is not running: Halted');
  return { kind: 'status', ops: changeRequestOps(vm, [{ action: 'Stop', uid: vmi.metadata.uid! }, { action: 'Start' }]) };
}

/** RestartOptions KubeVirt accepts: only a forced restart (0) may name a grace period. */
export function checkRestartOptions(opts: RestartOptions): void {
  const g = opts.gracePeriodSeconds;
  if (g !== undefined && g > 0) throw badRequest('For force restart, only gracePeriod=0 is supported for now');
  if (g !== undefined && g < 0) throw badRequest('gracePeriod has to be greater or equal to 0');
}

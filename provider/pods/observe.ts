// What the agent knows about one pod's VM, gathered from its launcher (live or
// gone) and the controller's own record of earlier runs, as the pure input of
// derivePodStatus.
import type { LauncherView } from '../launchers/registry.js';
import type { VmObservation } from './status.js';

/** The controller's memory of one pod's VM across launcher runs. */
export interface PodVmRecord {
  uid: string;
  /** `namespace/name` of the pod. */
  key: string;
  restartCount: number;
  lastTermination?: VmObservation['lastTermination'];
  /** When the agent first saw the current run stopped; the finish time when the launcher could not say. */
  stoppedSeenAt?: Date;
}

const at = (unixMs: number | undefined): Date | undefined => (unixMs ? new Date(unixMs) : undefined);

export function observeVm(view: LauncherView | undefined, rec: PodVmRecord): VmObservation | undefined {
  const base = { restartCount: rec.restartCount, ...(rec.lastTermination ? { lastTermination: rec.lastTermination } : {}) };
  // Between runs (a restart under way) there is no launcher, but the history stays.
  if (!view) return rec.restartCount > 0 || rec.lastTermination ? { ...base, guestReady: false } : undefined;
  if (view.live) {
    const s = view.state;
    const terminal = s.phase === 'Succeeded' || s.phase === 'Failed';
    const startedAt = at(s.startedAtUnixMs);
    return {
      ...base,
      phase: s.phase,
      reason: s.reason,
      message: s.message,
      guestReady: s.consoleOutputAtUnixMs > 0,
      agentConnected: s.guestAgentConnected,
      ...(s.guestOsInfo ? { guestOsInfo: s.guestOsInfo } : {}),
      ...(startedAt ? { startedAt } : {}),
      ...(s.domainUuid ? { domainUUID: s.domainUuid } : {}),
      ...(terminal && rec.stoppedSeenAt ? { finishedAt: rec.stoppedSeenAt } : {}),
    };
  }
  const last = view.lastState;
  const exit = view.gone.exit;
  // A launcher exits only after its VM stopped; a non-terminal last word means it was stopped before the VM ran.
  const phase = exit && (exit.phase === 'Succeeded' || exit.phase === 'Failed') ? exit.phase : 'Failed';
  const startedAt = at(last?.startedAtUnixMs);
  const finishedAt = at(exit?.atUnixMs) ?? rec.stoppedSeenAt;
  return {
    ...base,
    phase,
    reason: exit?.reason ?? view.gone.reason,
    message: exit?.message || view.gone.message,
    guestReady: false,
    ...(startedAt ? { startedAt } : {}),
    ...(finishedAt ? { finishedAt } : {}),
    ...(last?.domainUuid ? { domainUUID: last.domainUuid } : {}),
  };
}

/** Whether the VM's current run is over (its launcher exits or has exited). */
export function vmStopped(view: LauncherView | undefined): boolean {
  if (!view) return false;
  return !view.live || view.state.phase === 'Succeeded' || view.state.phase === 'Failed';
}

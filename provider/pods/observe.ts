// What the agent knows about one pod's VM, gathered from its launcher (live or
// gone) and the history of its earlier runs, as the pure input of
// derivePodStatus and nodeVmiStatus.
import type { LauncherView } from '../launchers/registry.js';
import { guestUp } from './guest-up.js';
import type { RunHistory } from './lifecycle.js';
import type { VmObservation } from './status.js';

const at = (unixMs: number | undefined): Date | undefined => (unixMs ? new Date(unixMs) : undefined);

/** `dhcpAckedAtUnixMs`: when the node's DHCP last served the VM's guest (a readiness signal, guest-up.ts). */
export function observeVm(
  view: LauncherView<unknown> | undefined,
  history: RunHistory,
  dhcpAckedAtUnixMs?: number,
): VmObservation | undefined {
  const base = { restartCount: history.restartCount, ...(history.lastTermination ? { lastTermination: history.lastTermination } : {}) };
  // Between runs (a restart under way) there is no launcher, but the history stays.
  if (!view) return history.restartCount > 0 || history.lastTermination ? { ...base, guestReady: false } : undefined;
  if (view.live) {
    const s = view.state;
    const terminal = s.phase === 'Succeeded' || s.phase === 'Failed';
    const startedAt = at(s.startedAtUnixMs);
    return {
      ...base,
      phase: s.phase,
      reason: s.reason,
      message: s.message,
      guestReady: guestUp(s, dhcpAckedAtUnixMs),
      agentConnected: s.guestAgentConnected,
      ...(s.guestOsInfo ? { guestOsInfo: s.guestOsInfo } : {}),
      ...(startedAt ? { startedAt } : {}),
      ...(s.domainUuid ? { domainUUID: s.domainUuid } : {}),
      ...(terminal && history.stoppedSeenAt ? { finishedAt: history.stoppedSeenAt } : {}),
    };
  }
  const last = view.lastState;
  const exit = view.gone.exit;
  // A launcher exits only after its VM stopped; a non-terminal last word means it was stopped before the VM ran.
  const phase = exit && (exit.phase === 'Succeeded' || exit.phase === 'Failed') ? exit.phase : 'Failed';
  const startedAt = at(last?.startedAtUnixMs);
  const finishedAt = at(exit?.atUnixMs) ?? history.stoppedSeenAt;
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
export function vmStopped(view: LauncherView<unknown> | undefined): boolean {
  if (!view) return false;
  return !view.live || view.state.phase === 'Succeeded' || view.state.phase === 'Failed';
}

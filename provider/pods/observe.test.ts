import t from 'tap';
import type { LauncherView } from '../launchers/registry.js';
import type { VmState } from '../../launcher/agent-api.js';
import type { RunHistory } from './lifecycle.js';
import { observeVm, vmStopped } from './observe.js';

const rec: RunHistory = { restartCount: 2 };
const state: VmState = {
  phase: 'Running',
  reason: 'Booted',
  message: '',
  qemuPid: 42,
  startedAtUnixMs: 1_700_000_000_000,
  consoleLogPath: '/x/console.log',
  domainUuid: 'u1',
  generation: 3,
  consoleOutputAtUnixMs: 0,
  firmwareOnConsole: false,
  guestAgentConnected: false,
  guestAgentConnectedAtUnixMs: 0,
};
const live = (s: Partial<VmState>): LauncherView => ({
  uid: 'u1',
  dir: '/x',
  live: true,
  client: {} as never,
  pid: 1,
  state: { ...state, ...s },
});

t.test('a live launcher: phase, start time, uuid; ready once its guest is up (guest-up.ts)', async (t) => {
  t.match(observeVm(live({}), rec), {
    phase: 'Running',
    guestReady: false,
    restartCount: 2,
    domainUUID: 'u1',
    startedAt: new Date(state.startedAtUnixMs),
  });
  t.match(observeVm(live({ consoleOutputAtUnixMs: 1 }), rec), { guestReady: true }, 'BIOS: the console spoke');
  t.match(observeVm(live({ consoleOutputAtUnixMs: 1, firmwareOnConsole: true }), rec), { guestReady: false }, 'UEFI: OVMF spoke');
  t.match(
    observeVm(live({ firmwareOnConsole: true }), rec, state.startedAtUnixMs + 5000),
    { guestReady: true },
    'UEFI: the guest took its address by DHCP in this run',
  );
  t.match(
    observeVm(live({ guestAgentConnected: true, guestOsInfo: { kernelRelease: '6.1.0-28-amd64' } }), rec),
    { agentConnected: true, guestOsInfo: { kernelRelease: '6.1.0-28-amd64' } },
    'the guest agent and what it reported',
  );
  t.notOk(vmStopped(live({})), 'running is not stopped');
  t.ok(vmStopped(live({ phase: 'Succeeded' })), 'a terminal phase is stopped while the launcher exits');
});

t.test('a launcher that exited reports its last word; one that died is Failed', async (t) => {
  const exited: LauncherView = {
    uid: 'u1',
    dir: '/x',
    live: false,
    gone: {
      reason: 'LauncherExited',
      message: 'm',
      exit: { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off', atUnixMs: 1_700_000_060_000 },
    },
    lastState: state,
  };
  t.match(observeVm(exited, rec), {
    phase: 'Succeeded',
    reason: 'GuestShutdown',
    finishedAt: new Date(1_700_000_060_000),
    startedAt: new Date(state.startedAtUnixMs),
    guestReady: false,
  });
  const seen = new Date(1_700_000_070_000);
  const died: LauncherView = { uid: 'u1', dir: '/x', live: false, gone: { reason: 'LauncherDied', message: 'launcher pid 9 died' } };
  t.match(observeVm(died, { ...rec, stoppedSeenAt: seen }), {
    phase: 'Failed',
    reason: 'LauncherDied',
    message: 'launcher pid 9 died',
    finishedAt: seen,
  });
  t.equal(observeVm(undefined, { ...rec, restartCount: 0 }), undefined, 'no launcher yet: nothing observed');
  t.same(observeVm(undefined, rec), { restartCount: 2, guestReady: false }, 'between runs of a restart: the history stays');
});

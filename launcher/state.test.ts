import t from 'tap';
import {
  awaitsCleanup,
  derivePhase,
  initialVmState,
  isSettled,
  poweredOffUpdate,
  runStarted,
  type PhaseInput,
  type VmState,
} from './state.js';

t.test('derivePhase: first matching rule decides phase, reason and message', async (t) => {
  const cases: [string, PhaseInput, ReturnType<typeof derivePhase>][] = [
    ['no domain yet', { domainState: 'absent', runReason: 'Booted' }, { phase: 'Pending', reason: 'NotStarted', message: '' }],
    [
      'start failed before a domain existed',
      { domainState: 'absent', runReason: 'Booted', startFailure: { reason: 'StartFailed', message: 'boom' } },
      { phase: 'Failed', reason: 'StartFailed', message: 'boom' },
    ],
    ['booted', { domainState: 'running', runReason: 'Booted' }, { phase: 'Running', reason: 'Booted', message: '' }],
    [
      'unpaused',
      { domainState: 'running', runReason: 'Unpaused', pauseDetail: 'Paused' },
      { phase: 'Running', reason: 'Unpaused', message: '' },
    ],
    [
      'paused on request',
      { domainState: 'paused', runReason: 'Booted', pauseDetail: 'Paused' },
      { phase: 'Paused', reason: 'Paused', message: '' },
    ],
    [
      'paused by an I/O error',
      { domainState: 'paused', runReason: 'Booted', pauseDetail: 'I/O Error' },
      { phase: 'Paused', reason: 'IOError', message: '' },
    ],
    [
      'guest powered off',
      { domainState: 'shutoff', runReason: 'Booted', stopEvent: { type: 'Stopped', detail: 'Shutdown' } },
      { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off' },
    ],
    [
      'killed on request',
      {
        domainState: 'shutoff',
        runReason: 'Booted',
        stopEvent: { type: 'Stopped', detail: 'Destroyed' },
        destroyIntent: { reason: 'Killed', message: 'destroyed on request' },
      },
      { phase: 'Succeeded', reason: 'Killed', message: 'destroyed on request' },
    ],
    [
      'killed for failing its liveness probe',
      {
        domainState: 'shutoff',
        runReason: 'Booted',
        stopEvent: { type: 'Stopped', detail: 'Destroyed' },
        destroyIntent: { reason: 'LivenessProbeFailed', message: 'dial tcp: refused', failed: true },
      },
      { phase: 'Failed', reason: 'LivenessProbeFailed', message: 'dial tcp: refused' },
    ],
    [
      'QEMU died',
      { domainState: 'shutoff', runReason: 'Booted', stopEvent: { type: 'Stopped', detail: 'Failed' } },
      { phase: 'Failed', reason: 'QemuFailed', message: 'QEMU exited unexpectedly' },
    ],
    [
      'migrated away (the source after the commit)',
      { domainState: 'shutoff', runReason: 'Booted', stopEvent: { type: 'Stopped', detail: 'Migrated' } },
      { phase: 'Succeeded', reason: 'Migrated', message: 'the VM moved to another node' },
    ],
    [
      'paused by an outgoing migration',
      { domainState: 'paused', runReason: 'Booted', pauseDetail: 'Migrated' },
      { phase: 'Paused', reason: 'Migrated', message: '' },
    ],
    [
      'unknown stop detail',
      { domainState: 'shutoff', runReason: 'Booted', stopEvent: { type: 'Stopped', detail: 'From Snapshot' } },
      { phase: 'Failed', reason: 'StoppedFromSnapshot', message: '' },
    ],
    ['shut off, Stopped event not in yet', { domainState: 'shutoff', runReason: 'Booted' }, undefined],
    [
      'Shutdown event in, QEMU still there: shutting down (or about to reset)',
      { domainState: 'shutdown', runReason: 'Booted', guestPoweredOff: false },
      { phase: 'Running', reason: 'ShuttingDown', message: 'the guest is powering off' },
    ],
    [
      'Shutdown event in and QEMU gone, libvirt still cleaning up: powered off without waiting for Stopped',
      { domainState: 'shutdown', runReason: 'Booted', guestPoweredOff: true },
      { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off' },
    ],
    [
      'QEMU gone after Shutdown, libvirt already shut the domain off, Stopped not in yet',
      { domainState: 'shutoff', runReason: 'Booted', guestPoweredOff: true },
      { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off' },
    ],
    [
      'running again after a Shutdown (an ACPI reboot reset the guest): never a power-off',
      { domainState: 'running', runReason: 'Booted', guestPoweredOff: true },
      { phase: 'Running', reason: 'Booted', message: '' },
    ],
    [
      'destroyed by the launcher after a Shutdown event: the kill intent decides',
      {
        domainState: 'shutoff',
        runReason: 'Booted',
        guestPoweredOff: true,
        stopEvent: { type: 'Stopped', detail: 'Destroyed' },
        destroyIntent: { reason: 'Killed', message: 'destroyed on request' },
      },
      { phase: 'Succeeded', reason: 'Killed', message: 'destroyed on request' },
    ],
    [
      'QEMU died after a Shutdown event, the launcher destroying: Stopped(Failed) still decides',
      {
        domainState: 'shutoff',
        runReason: 'Booted',
        guestPoweredOff: false,
        stopEvent: { type: 'Stopped', detail: 'Failed' },
      },
      { phase: 'Failed', reason: 'QemuFailed', message: 'QEMU exited unexpectedly' },
    ],
    [
      'removed after the guest powered off (the launcher exiting)',
      { domainState: 'absent', started: true, runReason: 'Booted', stopEvent: { type: 'Stopped', detail: 'Shutdown' } },
      { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off' },
    ],
    [
      'removed after its run, Stopped event not in yet: not NotStarted',
      { domainState: 'absent', started: true, runReason: 'Booted' },
      undefined,
    ],
  ];
  for (const [name, input, want] of cases) t.same(derivePhase(input), want, name);
});

t.test('a power-off reported ahead of libvirt awaits its clean-up; other ends are settled at once', async (t) => {
  const cases = [
    { phase: 'Succeeded', domainState: 'shutdown' },
    { phase: 'Succeeded', domainState: 'shutoff' },
    { phase: 'Failed', domainState: 'crashed' },
    { phase: 'Running', domainState: 'shutdown' },
  ] as const;
  t.same(
    cases.map((s) => ({ ...s, awaitsCleanup: awaitsCleanup(s), settled: isSettled(s) })),
    [
      { phase: 'Succeeded', domainState: 'shutdown', awaitsCleanup: true, settled: false },
      { phase: 'Succeeded', domainState: 'shutoff', awaitsCleanup: false, settled: true },
      { phase: 'Failed', domainState: 'crashed', awaitsCleanup: false, settled: true },
      { phase: 'Running', domainState: 'shutdown', awaitsCleanup: false, settled: false },
    ],
  );
});

t.test('QEMU gone after Shutdown, libvirt not answering: the domain is taken as libvirt set it with that event', async (t) => {
  const killed = { reason: 'Killed', message: 'destroyed on request' };
  const off = { phase: 'Succeeded', reason: 'GuestShutdown', message: 'the guest powered off', qemuPid: 0, guestAgentConnected: false };
  t.same(
    {
      lastReadRunning: poweredOffUpdate({ domainState: 'running', runReason: 'Booted' }),
      lastReadShutoff: poweredOffUpdate({ domainState: 'shutoff', runReason: 'Booted' }),
      beingDestroyed: poweredOffUpdate({ domainState: 'running', runReason: 'Booted', destroyIntent: killed }),
    },
    {
      lastReadRunning: { ...off, domainState: 'shutdown', guestOsInfo: undefined },
      lastReadShutoff: { ...off, domainState: 'shutoff', guestOsInfo: undefined },
      beingDestroyed: undefined,
    },
  );
});

t.test("a run's start forgets what the guest did in the earlier run and takes the firmware of this one", async (t) => {
  const earlier: VmState = {
    ...initialVmState('/run/console.log'),
    phase: 'Running',
    reason: 'Booted',
    startedAtUnixMs: 1000,
    domainUuid: 'old',
    qemuPid: 7,
    consoleOutputAtUnixMs: 1500,
    guestAgentConnected: true,
    guestAgentConnectedAtUnixMs: 9000,
    guestOsInfo: { name: 'Debian' },
  };
  const { guestOsInfo: _osInfo, ...kept } = earlier;
  t.same(runStarted(earlier, { domainUuid: 'new', firmwareOnConsole: true, atUnixMs: 20_000 }), {
    ...kept,
    startedAtUnixMs: 20_000,
    domainUuid: 'new',
    qemuPid: 0,
    consoleOutputAtUnixMs: 0,
    firmwareOnConsole: true,
    guestAgentConnected: false,
    guestAgentConnectedAtUnixMs: 0,
  });
});

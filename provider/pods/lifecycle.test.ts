import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { newLifecycle, transition, type LifecycleEvent, type LifecycleState, type PodLifecycle } from './lifecycle.js';

const pod: V1Pod = { metadata: { name: 'p', namespace: 'ns', uid: 'u1' }, spec: { containers: [{ name: 'vm' }] } };
const at = (state: LifecycleState): PodLifecycle => ({ ...newLifecycle(pod), state });
const imageBackOff = { kind: 'ImageBackOff', failures: 1, error: { reason: 'ErrImagePull', message: 'm' }, retryAtMs: 10_000 } as const;
const startBackOff = { kind: 'StartBackOff', failures: 1, message: 'no space left on device', retryAtMs: 10_000 } as const;
const incoming = (prepared: boolean): LifecycleState => ({ kind: 'Incoming', migrationUid: 'm', prepared });
const startFailed = { type: 'startFailed', message: 'no space left on device' } as const;
const ended = (phase: 'Succeeded' | 'Failed', restartPolicy: string): LifecycleEvent => ({
  type: 'ended',
  vm: { phase, guestReady: false, restartCount: 0 },
  restartPolicy,
});

t.test('the transition table, guards included', async (t) => {
  const rows: Array<[string, LifecycleState, LifecycleEvent, number]> = [
    ['a new pod starts', { kind: 'Waiting' }, { type: 'startBegan' }, 0],
    ['a start that worked runs', { kind: 'Preparing' }, { type: 'started', specHash: 'h' }, 0],
    ['a missing image backs off', { kind: 'Preparing' }, { type: 'imageMissing', message: 'm' }, 0],
    ['an image back-off holds the next pull', imageBackOff, { type: 'startBegan' }, 9_999],
    ['and lets it go when due', imageBackOff, { type: 'startBegan' }, 10_000],
    ['a failed start backs off', { kind: 'Preparing' }, startFailed, 0],
    ['a start back-off holds the next attempt', startBackOff, { type: 'startBegan' }, 9_999],
    ['and lets it go when due', startBackOff, { type: 'startBegan' }, 10_000],
    ['a pull retried that fails to start backs off too', { kind: 'Preparing', retrying: imageBackOff }, startFailed, 0],
    ['a network that fails before the launcher backs off as well', { kind: 'Waiting' }, startFailed, 0],
    ['a failure while held changes nothing', startBackOff, startFailed, 9_999],
    ['a running VM is no start that failed', { kind: 'Running' }, startFailed, 0],
    ['a power-off under Always backs off', { kind: 'Running' }, ended('Succeeded', 'Always'), 0],
    ['a power-off under OnFailure is final', { kind: 'Running' }, ended('Succeeded', 'OnFailure'), 0],
    ['a crash under OnFailure backs off', { kind: 'Running' }, ended('Failed', 'OnFailure'), 0],
    ['a crash under Never is final', { kind: 'Running' }, ended('Failed', 'Never'), 0],
    ['a restart back-off holds the restart', { kind: 'BackingOff', untilMs: 10_000, delayMs: 10_000 }, { type: 'restart' }, 9_999],
    ['and lets it go when due', { kind: 'BackingOff', untilMs: 10_000, delayMs: 10_000 }, { type: 'restart' }, 10_000],
    ['a launcher found running is adopted', { kind: 'Waiting' }, { type: 'launcherRunning' }, 0],
    ['a start under way is not adopted', { kind: 'Preparing' }, { type: 'launcherRunning' }, 0],
    ['an invalid spec fails a running VM', { kind: 'Running' }, { type: 'invalid', message: 'm', found: 'translation' }, 0],
    ['a valid spec again starts over', { kind: 'Invalid', message: 'm', found: 'translation' }, { type: 'valid' }, 0],
    ['what a start found stays, however well the spec translates', { kind: 'Invalid', message: 'm', found: 'start' }, { type: 'valid' }, 0],
    ['a deletion ends everything', { kind: 'BackingOff', untilMs: 1, delayMs: 1 }, { type: 'deleting' }, 0],
    ['and nothing moves a deletion', { kind: 'Terminating', was: { kind: 'Running' } }, { type: 'startBegan' }, 0],
    ['a migration target receives', { kind: 'Waiting' }, { type: 'incoming', migrationUid: 'm' }, 0],
    ['a receiving target never starts a VM', incoming(false), { type: 'startBegan' }, 0],
    ['nor is its waiting launcher adopted as a VM', incoming(true), { type: 'launcherRunning' }, 0],
    ['the VM arrived: it runs', incoming(true), { type: 'resumed' }, 0],
    ['a target whose launcher is gone ends, whatever the restart policy', incoming(true), ended('Failed', 'Always'), 0],
    ['a running VM is no target', { kind: 'Running' }, { type: 'incoming', migrationUid: 'm' }, 0],
  ];
  t.same(
    rows.map(([name, state, event, nowMs]) => [name, transition(at(state), event, nowMs).state.kind]),
    [
      ['a new pod starts', 'Preparing'],
      ['a start that worked runs', 'Running'],
      ['a missing image backs off', 'ImageBackOff'],
      ['an image back-off holds the next pull', 'ImageBackOff'],
      ['and lets it go when due', 'Preparing'],
      ['a failed start backs off', 'StartBackOff'],
      ['a start back-off holds the next attempt', 'StartBackOff'],
      ['and lets it go when due', 'Preparing'],
      ['a pull retried that fails to start backs off too', 'StartBackOff'],
      ['a network that fails before the launcher backs off as well', 'StartBackOff'],
      ['a failure while held changes nothing', 'StartBackOff'],
      ['a running VM is no start that failed', 'Running'],
      ['a power-off under Always backs off', 'BackingOff'],
      ['a power-off under OnFailure is final', 'Finished'],
      ['a crash under OnFailure backs off', 'BackingOff'],
      ['a crash under Never is final', 'Finished'],
      ['a restart back-off holds the restart', 'BackingOff'],
      ['and lets it go when due', 'Waiting'],
      ['a launcher found running is adopted', 'Running'],
      ['a start under way is not adopted', 'Preparing'],
      ['an invalid spec fails a running VM', 'Invalid'],
      ['a valid spec again starts over', 'Waiting'],
      ['what a start found stays, however well the spec translates', 'Invalid'],
      ['a deletion ends everything', 'Terminating'],
      ['and nothing moves a deletion', 'Terminating'],
      ['a migration target receives', 'Incoming'],
      ['a receiving target never starts a VM', 'Incoming'],
      ['nor is its waiting launcher adopted as a VM', 'Incoming'],
      ['the VM arrived: it runs', 'Running'],
      ['a target whose launcher is gone ends, whatever the restart policy', 'Finished'],
      ['a running VM is no target', 'Running'],
    ],
  );
});

t.test(
  'the history: a back-off records the run that ended, a restart counts it; a pod first seen takes both from its status',
  async (t) => {
    const startedAt = new Date(1_000);
    const finishedAt = new Date(61_000);
    // Why the run ended stays with it, across a restart and an agent restart (which reads it back from the status).
    const ended = { reason: 'Error', exitCode: 1, message: 'QEMU exited unexpectedly' };
    const backingOff = transition(
      at({ kind: 'Running' }),
      {
        type: 'ended',
        vm: { phase: 'Failed', message: 'QEMU exited unexpectedly', startedAt, finishedAt, guestReady: false, restartCount: 0 },
        restartPolicy: 'Always',
      },
      70_000,
    );
    const restarted = transition(transition(backingOff, { type: 'stopSeen' }, 70_000), { type: 'restart' }, 80_000);
    const seen = newLifecycle({
      ...pod,
      status: {
        containerStatuses: [
          {
            name: 'vm',
            image: '',
            imageID: '',
            ready: false,
            restartCount: 4,
            lastState: { terminated: { exitCode: 1, reason: 'Error', message: 'QEMU exited unexpectedly', startedAt, finishedAt } },
          },
        ],
      },
    });
    t.same(
      { backingOff: backingOff.history, restarted: restarted.history, seen: seen.history },
      {
        backingOff: { restartCount: 0, lastTermination: { ...ended, startedAt, finishedAt } },
        restarted: { restartCount: 1, lastTermination: { ...ended, startedAt, finishedAt } },
        seen: { restartCount: 4, lastTermination: { ...ended, startedAt, finishedAt } },
      },
    );
  },
);

t.test('failed starts back off 10 s, doubling, counted across retries; the message is kept', async (t) => {
  const first = transition(at({ kind: 'Preparing' }), startFailed, 0);
  const retried = transition(first, { type: 'startBegan' }, 10_000);
  const second = transition(retried, { type: 'startFailed', message: 'still full' }, 10_000);
  t.same(
    [first.state, retried.state.kind, second.state],
    [
      { kind: 'StartBackOff', failures: 1, message: 'no space left on device', retryAtMs: 10_000 },
      'Preparing',
      { kind: 'StartBackOff', failures: 2, message: 'still full', retryAtMs: 30_000 },
    ],
  );
});

t.test('a target is prepared once; it is admitted from the start', async (t) => {
  const received = transition(at({ kind: 'Waiting' }), { type: 'incoming', migrationUid: 'm' }, 0);
  const prepared = transition(received, { type: 'incomingPrepared' }, 0);
  t.same(
    {
      received: [received.state, received.admitted],
      prepared: prepared.state,
      again: transition(prepared, { type: 'incomingPrepared' }, 0) === prepared,
    },
    {
      received: [{ kind: 'Incoming', migrationUid: 'm', prepared: false }, true],
      prepared: { kind: 'Incoming', migrationUid: 'm', prepared: true },
      again: true,
    },
  );
});

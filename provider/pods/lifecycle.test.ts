import t from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import { newLifecycle, transition, type LifecycleEvent, type LifecycleState, type PodLifecycle } from './lifecycle.js';

const pod: V1Pod = { metadata: { name: 'p', namespace: 'ns', uid: 'u1' }, spec: { containers: [{ name: 'vm' }] } };
const at = (state: LifecycleState): PodLifecycle => ({ ...newLifecycle(pod), state });
const imageBackOff = { kind: 'ImageBackOff', failures: 1, error: { reason: 'ErrImagePull', message: 'm' }, retryAtMs: 10_000 } as const;
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
    ['a failed retry goes back to its back-off', { kind: 'Preparing', retrying: imageBackOff }, { type: 'startFailed' }, 0],
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
  ];
  t.same(
    rows.map(([name, state, event, nowMs]) => [name, transition(at(state), event, nowMs).state.kind]),
    [
      ['a new pod starts', 'Preparing'],
      ['a start that worked runs', 'Running'],
      ['a missing image backs off', 'ImageBackOff'],
      ['an image back-off holds the next pull', 'ImageBackOff'],
      ['and lets it go when due', 'Preparing'],
      ['a failed retry goes back to its back-off', 'ImageBackOff'],
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
    ],
  );
});

t.test(
  'the history: a back-off records the run that ended, a restart counts it; a pod first seen takes both from its status',
  async (t) => {
    const startedAt = new Date(1_000);
    const finishedAt = new Date(61_000);
    const backingOff = transition(
      at({ kind: 'Running' }),
      { type: 'ended', vm: { phase: 'Failed', startedAt, finishedAt, guestReady: false, restartCount: 0 }, restartPolicy: 'Always' },
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
            lastState: { terminated: { exitCode: 1, reason: 'Error', startedAt, finishedAt } },
          },
        ],
      },
    });
    t.same(
      { backingOff: backingOff.history, restarted: restarted.history, seen: seen.history },
      {
        backingOff: { restartCount: 0, lastTermination: { reason: 'Error', exitCode: 1, startedAt, finishedAt } },
        restarted: { restartCount: 1, lastTermination: { reason: 'Error', exitCode: 1, startedAt, finishedAt } },
        seen: { restartCount: 4, lastTermination: { reason: 'Error', exitCode: 1, startedAt, finishedAt } },
      },
    );
  },
);

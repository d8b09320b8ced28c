import t from 'tap';
import { setImmediate as turn } from 'node:timers/promises';
import { fakeClock, type FakeClock } from '../helpers/fake-clock.js';
import { bootedSample, idleWindowDisturbances, untilQuiet } from './density-phases.js';

const STEP_MS = 50;

/** Settles `p`, moving `clock` on in steps while it waits; `onStep` changes the world as time passes. */
async function drive<T>(clock: FakeClock, p: Promise<T>, onStep: (now: number) => void = () => {}): Promise<T> {
  let settled = false;
  p.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (await turn(); !settled; await turn()) {
    clock.advance(STEP_MS);
    onStep(clock.now());
  }
  return p;
}

const signal = new AbortController().signal;

t.test('the idle window waits until the last pod event is quietMs old, and restarts the wait on a later one', async (t) => {
  let last = 0;
  const clock = fakeClock(0);
  // An event 1000 ms in (a late status write), seen at 500 ms, then none.
  const since = await drive(
    clock,
    untilQuiet(() => last, { quietMs: 500, timeoutMs: 10_000, signal }, clock),
    (now) => {
      if (now === 500) last = 1000;
    },
  );
  t.same({ since, end: clock.now() }, { since: 1000, end: 1500 });
});

t.test('statuses that never settle fail the wait, naming the quiet wanted', async (t) => {
  const clock = fakeClock(0);
  // Every check sees an event just now.
  await t.rejects(
    drive(
      clock,
      untilQuiet(() => clock.now(), { quietMs: 500, timeoutMs: 2000, signal }, clock),
    ),
    /did not stay still for 500 ms within 2000 ms/,
  );
});

t.test('a window with a pod event or a launcher gone or new is named as disturbed; a still one is not', async (t) => {
  t.same(idleWindowDisturbances({ podEvents: 7, launcherPids: [1, 2] }, { podEvents: 7, launcherPids: [2, 1] }), []);
  t.same(idleWindowDisturbances({ podEvents: 7, launcherPids: [1, 2] }, { podEvents: 9, launcherPids: [2, 3] }), [
    '2 pod event(s) in the window',
    'launcher(s) 1 exited',
    'launcher(s) 3 started',
  ]);
});

t.test('the sample is the first guests to boot, in the order they booted, and stops at its size', async (t) => {
  const bootsAt: Record<string, number> = { a: 300, b: 100, c: 200, d: 400 };
  const clock = fakeClock(0);
  const asked: string[] = [];
  const sample = await drive(
    clock,
    bootedSample(
      Object.keys(bootsAt),
      async (n) => {
        asked.push(n);
        return clock.now() >= bootsAt[n]!;
      },
      { size: 2, pollMs: 100, timeoutMs: 10_000, signal },
      clock,
    ),
  );
  t.same(sample, ['b', 'c'], 'b booted first, then c; a and d later');
  t.equal(clock.now(), 200, 'done once the second booted');
  t.same(asked, ['a', 'b', 'c', 'd', 'a', 'b', 'c', 'd', 'a', 'c'], 'b, booted at 100, is not asked at 200; d not once the sample is full');
});

t.test('at the deadline the sample is what booted, smaller than asked; none booted is an error', async (t) => {
  const clock = fakeClock(0);
  const sample = await drive(
    clock,
    bootedSample(['a', 'b', 'c'], async (n) => n === 'b' && clock.now() >= 50, { size: 10, pollMs: 100, timeoutMs: 250, signal }, clock),
  );
  t.same({ sample, end: clock.now() }, { sample: ['b'], end: 250 });
  const other = fakeClock(0);
  await t.rejects(
    drive(
      other,
      bootedSample(['a'], async () => false, { size: 1, pollMs: 100, timeoutMs: 250, signal }, other),
    ),
    /none of the 1 guests booted within 250 ms/,
  );
});

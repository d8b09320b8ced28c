import t from 'tap';
import { bootedSample, idleWindowDisturbances, untilQuiet, type Clock } from './density-phases.js';

/** A clock that only moves when slept on; `onSleep` lets a test change the world as time passes. */
function fakeClock(onSleep: (now: number) => void = () => {}): Clock & { slept: number[] } {
  let now = 0;
  const slept: number[] = [];
  return {
    slept,
    now: () => now,
    sleep: async (ms) => {
      slept.push(ms);
      now += ms;
      onSleep(now);
    },
  };
}

const signal = new AbortController().signal;

t.test('the idle window waits until the last pod event is quietMs old, and restarts the wait on a later one', async (t) => {
  let last = 0;
  // An event 1000 ms in (a late status write), then none.
  const clock = fakeClock((now) => {
    if (now === 500) last = 1000;
  });
  const since = await untilQuiet(() => last, { quietMs: 500, timeoutMs: 10_000, signal }, clock);
  t.same({ since, end: clock.now(), slept: clock.slept }, { since: 1000, end: 1500, slept: [500, 1000] });
});

t.test('statuses that never settle fail the wait, naming the quiet wanted', async (t) => {
  const clock = fakeClock();
  // Every check sees an event just now.
  await t.rejects(
    untilQuiet(() => clock.now(), { quietMs: 500, timeoutMs: 2000, signal }, clock),
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
  const clock = fakeClock();
  const asked: string[] = [];
  const sample = await bootedSample(
    Object.keys(bootsAt),
    async (n) => {
      asked.push(n);
      return clock.now() >= bootsAt[n]!;
    },
    { size: 2, pollMs: 100, timeoutMs: 10_000, signal },
    clock,
  );
  t.same(sample, ['b', 'c'], 'b booted first, then c; a and d later');
  t.equal(clock.now(), 200, 'done once the second booted');
  t.same(asked, ['a', 'b', 'c', 'd', 'a', 'b', 'c', 'd', 'a', 'c'], 'b, booted at 100, is not asked at 200; d not once the sample is full');
});

t.test('at the deadline the sample is what booted, smaller than asked; none booted is an error', async (t) => {
  const clock = fakeClock();
  const sample = await bootedSample(
    ['a', 'b', 'c'],
    async (n) => n === 'b' && clock.now() >= 50,
    { size: 10, pollMs: 100, timeoutMs: 250, signal },
    clock,
  );
  t.same({ sample, end: clock.now() }, { sample: ['b'], end: 250 });
  await t.rejects(
    bootedSample(['a'], async () => false, { size: 1, pollMs: 100, timeoutMs: 250, signal }, fakeClock()),
    /none of the 1 guests booted within 250 ms/,
  );
});

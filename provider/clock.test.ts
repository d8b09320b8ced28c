import t from 'tap';
import { fakeClock } from '../test/helpers/fake-clock.js';
import { sleep } from './clock.js';

t.test('sleep resolves once its time has come on the clock, not before', async (t) => {
  const clock = fakeClock(0);
  let woke = false;
  const done = sleep(clock, 100).then(() => (woke = true));
  clock.advance(99);
  await Promise.resolve();
  t.equal(woke, false);
  clock.advance(1);
  await done;
  t.equal(clock.now(), 100);
});

t.test('an abort rejects the sleep with its reason and cancels the timer; an aborted signal rejects at once', async (t) => {
  const clock = fakeClock(0);
  const ac = new AbortController();
  const slept = sleep(clock, 100, ac.signal);
  ac.abort(new Error('stop'));
  await t.rejects(slept, /stop/);
  t.equal(clock.pending(), 0, 'no timer left behind');
  await t.rejects(sleep(clock, 100, ac.signal), /stop/);
  t.equal(clock.pending(), 0);
});

import { PassThrough } from 'node:stream';
import t from 'tap';
import { IdleTimer, SessionIdleError, type Clock } from './idle-timer.js';

/** Time that moves only when told, running the timers that come due on the way. */
function fakeClock(): Clock & { advance(ms: number): void; pending(): number } {
  let now = 0;
  let nextId = 0;
  const timers = new Map<number, { at: number; callback: () => void }>();
  return {
    now: () => now,
    setTimeout(callback, ms) {
      timers.set(++nextId, { at: now + ms, callback });
      return nextId;
    },
    clearTimeout: (handle) => void timers.delete(handle as number),
    advance(ms) {
      const end = now + ms;
      for (;;) {
        const due = [...timers].filter(([, timer]) => timer.at <= end).sort(([, a], [, b]) => a.at - b.at)[0];
        if (!due) break;
        timers.delete(due[0]);
        now = due[1].at;
        due[1].callback();
      }
      now = end;
    },
    pending: () => timers.size,
  };
}

t.test('a session without traffic is aborted once the timeout has passed, with a reason naming it', async (t) => {
  const clock = fakeClock();
  const idle = new IdleTimer(3000, clock);
  clock.advance(2999);
  t.equal(idle.signal.aborted, false);
  clock.advance(1);
  t.equal(idle.signal.aborted, true);
  t.type(idle.signal.reason, SessionIdleError);
  t.match(idle.signal.reason, { message: 'session closed after 3s without traffic (--streaming-connection-idle-timeout)' });
});

t.test('traffic either way on the watched streams pushes the end back by a whole timeout', async (t) => {
  const clock = fakeClock();
  const idle = new IdleTimer(4 * 3_600_000, clock);
  const input = new PassThrough();
  const output = new PassThrough();
  input.resume();
  output.resume();
  idle.watch([input, undefined, output]);
  clock.advance(3 * 3_600_000);
  input.write('keystroke');
  clock.advance(3 * 3_600_000);
  output.write('guest output');
  clock.advance(4 * 3_600_000 - 1);
  t.equal(idle.signal.aborted, false, 'never 4 h without traffic');
  t.equal(clock.pending(), 1, 'one timer at a time');
  clock.advance(1);
  t.equal(idle.signal.aborted, true, '4 h after the last chunk');
});

t.test('a stopped timer never aborts', async (t) => {
  const clock = fakeClock();
  const idle = new IdleTimer(1000, clock);
  idle.stop();
  clock.advance(10_000);
  t.same({ aborted: idle.signal.aborted, pending: clock.pending() }, { aborted: false, pending: 0 });
});

// A clock that moves only when a test says so: timers due by then fire in
// order of their due time, each with now() at that time.
import type { Clock } from '../../provider/clock.js';

export interface FakeClock extends Clock {
  /** Moves time forward by `ms`, firing the timers that fall due on the way. */
  advance(ms: number): void;
  /** Timers not yet fired. */
  pending(): number;
}

export function fakeClock(startMs = Date.UTC(2026, 10, 1)): FakeClock {
  let nowMs = startMs;
  let nextId = 0;
  const timers = new Map<number, { dueMs: number; fn: () => void }>();
  return {
    now: () => nowMs,
    after(delayMs, fn) {
      const id = nextId++;
      timers.set(id, { dueMs: nowMs + Math.max(0, delayMs), fn });
      return () => timers.delete(id);
    },
    advance(ms) {
      const endMs = nowMs + ms;
      for (;;) {
        const due = [...timers].filter(([, t]) => t.dueMs <= endMs).sort(([a, x], [b, y]) => x.dueMs - y.dueMs || a - b)[0];
        if (!due) break;
        timers.delete(due[0]);
        nowMs = due[1].dueMs;
        due[1].fn();
      }
      nowMs = endMs;
    },
    pending: () => timers.size,
  };
}

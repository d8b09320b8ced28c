import t from 'tap';
import { pino } from 'pino';
import { KeyQueue } from './key-queue.js';
import { fakeClock } from '../../test/helpers/fake-clock.js';

const log = pino({ level: 'silent' });

t.test('a key queued twice runs once; a key added while running runs again after', async (t) => {
  const runs: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const q = new KeyQueue(
    async (key) => {
      runs.push(key);
      if (runs.length === 1) await gate;
    },
    { name: 't', workers: 2, log },
  );
  q.add('a');
  q.add('a');
  await new Promise((r) => setImmediate(r));
  q.add('a'); // while in flight
  q.add('b');
  release();
  await new Promise((r) => setTimeout(r, 20));
  await q.idle();
  t.same(runs.sort(), ['a', 'a', 'b']);
});

t.test('failures retry with backoff until success', async (t) => {
  let attempts = 0;
  const q = new KeyQueue(
    async () => {
      attempts++;
      if (attempts < 3) throw new Error('transient');
    },
    { name: 't', workers: 1, baseDelayMs: 5, maxDelayMs: 20, log, random: () => 0.5 },
  );
  q.add('k');
  const deadline = Date.now() + 2000;
  while (attempts < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  await q.idle();
  t.equal(attempts, 3);
  t.equal(q.retryDelayMs('k'), 5, 'success resets the backoff');
  q.stop();
});

t.test('backoff doubles and is capped', async (t) => {
  const q = new KeyQueue(
    async () => {
      throw new Error('x');
    },
    { name: 't', workers: 1, baseDelayMs: 100, maxDelayMs: 300, log, random: () => 0.5 },
  );
  t.equal(q.retryDelayMs('k'), 100);
  q.add('k');
  await new Promise((r) => setTimeout(r, 10));
  t.equal(q.retryDelayMs('k'), 200);
  q.stop();
});

t.test('addAfter runs the key when the clock gets there; an add() meanwhile runs it at once as well', async (t) => {
  const clock = fakeClock();
  const runs: string[] = [];
  const q = new KeyQueue(async (key) => void runs.push(key), { name: 't', workers: 1, log, clock });
  q.addAfter('later', 10_000);
  q.addAfter('sooner', 10_000);
  q.add('sooner');
  await q.idle();
  clock.advance(9_999);
  await q.idle();
  const before = [...runs];
  clock.advance(1);
  await q.idle();
  t.same({ before, after: runs }, { before: ['sooner'], after: ['sooner', 'later', 'sooner'] });
});

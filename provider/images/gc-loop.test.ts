// settle() waits for a pass that sees the state as of its call: with one under
// way, the pass queued after it, not just the one already running.
import { pino } from 'pino';
import { Counter, Registry } from 'prom-client';
import t from 'tap';
import { GcLoop } from './gc-loop.js';

t.test('settle during a pass waits for the one queued after it; with none under way, for one it starts', async (t) => {
  const started: number[] = [];
  const finished: number[] = [];
  let release: (() => void) | undefined;
  const loop = new GcLoop({
    periodMs: 3_600_000,
    pass: async () => {
      const n = started.push(started.length + 1);
      // The first pass is held open until released; later ones finish at once.
      if (n === 1) await new Promise<void>((resolve) => (release = resolve));
      finished.push(n);
      return 'freed';
    },
    runs: new Counter({ name: 'runs', help: 'runs', labelNames: ['result'] as const, registers: [new Registry()] }),
    log: pino({ level: 'silent' }),
    what: 'test',
  });
  loop.kick();
  const settled = loop.settle();
  release!();
  await settled;
  t.same(finished, [1, 2], 'the pass under way, then the one queued by settle');
  await loop.settle();
  t.same(finished, [1, 2, 3], 'idle: settle runs a pass of its own');
  await loop.stop();
});

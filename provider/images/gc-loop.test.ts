// settle() waits for a pass that sees the state as of its call: with one under
// way, the pass queued after it, not just the one already running.
import { pino } from 'pino';
import { Counter, Registry } from 'prom-client';
import t from 'tap';
import { GcLoop } from './gc-loop.js';

/** Its first pass is held open until released; later ones finish at once. */
class HeldFirstPass extends GcLoop {
  readonly started: number[] = [];
  readonly finished: number[] = [];
  release: (() => void) | undefined;

  constructor() {
    super({
      periodMs: 3_600_000,
      runs: new Counter({ name: 'runs', help: 'runs', labelNames: ['result'] as const, registers: [new Registry()] }),
      log: pino({ level: 'silent' }),
      what: 'test',
    });
  }

  async runOnce(): Promise<string> {
    const n = this.started.push(this.started.length + 1);
    if (n === 1) await new Promise<void>((resolve) => (this.release = resolve));
    this.finished.push(n);
    return 'freed';
  }
}

t.test('settle during a pass waits for the one queued after it; with none under way, for one it starts', async (t) => {
  const loop = new HeldFirstPass();
  const { finished } = loop;
  loop.kick();
  const settled = loop.settle();
  loop.release!();
  await settled;
  t.same(finished, [1, 2], 'the pass under way, then the one queued by settle');
  await loop.settle();
  t.same(finished, [1, 2, 3], 'idle: settle runs a pass of its own');
  await loop.stop();
});

// The schedule of a garbage collector (the image store's, the URL image
// cache's): a pass every period and whenever kicked (after a pull or a
// download), never two at once; a kick during a pass runs one more after it.
// Each collector extends it with its pass, `runOnce`.
import type { Counter } from 'prom-client';
import type { Logger } from '../log.js';

export interface GcLoopOptions {
  periodMs: number;
  /** Runs at start too, unless false (the URL cache's pins are known only once pods have synced). */
  passAtStart?: boolean;
  /** Passes by result ('error' for a failed one). */
  runs: Counter<'result'>;
  log: Logger;
  what: string;
}

export abstract class GcLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private stopped = false;

  constructor(private readonly options: GcLoopOptions) {}

  /** One pass; its result counts in `runs`. */
  abstract runOnce(): Promise<string>;

  start(): void {
    this.timer = setInterval(() => this.kick(), this.options.periodMs);
    this.timer.unref();
    if (this.options.passAtStart !== false) this.kick();
  }

  /** Runs a pass now, or once more after the one under way. */
  kick(): void {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.runOnce().then(
      (result) => {
        this.options.runs.inc({ result });
      },
      (err: unknown) => {
        this.options.runs.inc({ result: 'error' });
        this.options.log.warn({ err }, `${this.options.what} garbage collection failed; the next pass retries`);
      },
    );
    void this.running.finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** Kicks, then waits until no pass runs or is due: the one kicked (or queued after the one under way) included. */
  async settle(): Promise<void> {
    this.kick();
    // A pass's own `finally` (registered first) starts the queued one before this wakes.
    while (this.running) await this.running;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.again = false;
    await this.running;
  }
}

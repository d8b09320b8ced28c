// A level-triggered pass run again `periodMs` after each one ends (never two
// at once); a pass that throws is logged and the next one retries.
import type { Logger } from '../log.js';

export class PeriodicPass {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly pass: () => Promise<void>,
    private readonly o: { periodMs: number; log: Logger; failure: string },
  ) {}

  start(): void {
    const loop = async (): Promise<void> => {
      await this.pass().catch((err: unknown) => this.o.log.warn({ err }, this.o.failure));
      if (!this.stopped) this.timer = setTimeout(() => void loop(), this.o.periodMs);
    };
    void loop();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

// Named points of a start, in whole ms since a reference, for the log lines
// that close it ("launcher ready", "VM started"): the launcher.start bench
// splits its wall time with them (test/bench/launcher.ts).

/** Each `mark` records when a step ended; a later mark of the same name replaces it. */
export class Phases {
  private readonly marks: Record<string, number> = {};
  /** `t0`: performance.now() of the reference; 0 is the process's start. */
  constructor(private readonly t0 = performance.now()) {}

  mark(name: string): void {
    this.marks[name] = Math.round(performance.now() - this.t0);
  }

  /** Marks a step when `promise` settles, and passes it on: for steps that run side by side. */
  after<T>(name: string, promise: Promise<T>): Promise<T> {
    return promise.finally(() => this.mark(name));
  }

  get all(): Readonly<Record<string, number>> {
    return { ...this.marks };
  }
}

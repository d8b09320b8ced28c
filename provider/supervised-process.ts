// A host process kept running for as long as its owner runs: its command made
// afresh before each run (so a restart re-reads configuration), started again
// after a capped, jittered back-off when it exits, its output appended to one
// log file, and killed with its owner however the owner dies. Each run is a
// host service (provider/cluster-services/host-service.ts); stop() ends it:
// SIGTERM, then SIGKILL after a grace.
import { spawnHostService, type HostService } from './cluster-services/host-service.js';
import type { Logger } from './log.js';

const MAX_BACKOFF_MS = 30_000;

export interface SupervisedCommand {
  /** The binary and its arguments. */
  argv: string[];
  /** Added to this process's environment. */
  env?: Record<string, string>;
}

export interface SupervisedProcessOptions {
  /** What the log says it is. */
  name: string;
  /** Called before each run; a rejection is retried after the back-off. */
  command: () => Promise<SupervisedCommand>;
  logFile: string;
  log: Logger;
}

export class SupervisedProcess {
  private child: HostService | undefined;
  /** From the child's spawn until its exit. */
  private running = false;
  private stopped = false;
  private wake: (() => void) | undefined;
  private loop: Promise<void> | undefined;

  constructor(private readonly o: SupervisedProcessOptions) {}

  /** The running process's pid, if one runs. */
  get pid(): number | undefined {
    return this.running ? this.child?.pid : undefined;
  }

  start(): void {
    this.loop ??= this.run();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.child?.stop();
    await this.loop;
  }

  private async run(): Promise<void> {
    let backoffMs = 1000;
    while (!this.stopped) {
      const started = Date.now();
      try {
        const why = await this.runOnce();
        if (this.stopped) return;
        this.o.log.warn({ exit: why, log: this.o.logFile }, `${this.o.name} exited; starting it again`);
      } catch (err) {
        if (this.stopped) return;
        this.o.log.warn({ err }, `${this.o.name} could not start; trying again`);
      }
      if (Date.now() - started > MAX_BACKOFF_MS) backoffMs = 1000;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, backoffMs * (0.8 + Math.random() * 0.4));
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
    }
  }

  /** One run, until the process exits: resolves with its exit code or signal. */
  private async runOnce(): Promise<string> {
    const { argv, env } = await this.o.command();
    if (this.stopped) return 'stopped';
    const child = spawnHostService(argv as [string, ...string[]], this.o.logFile, env);
    this.child = child;
    this.running = true;
    this.o.log.info({ pid: child.pid }, `${this.o.name} started`);
    try {
      return await child.exited;
    } finally {
      this.running = false;
    }
  }
}

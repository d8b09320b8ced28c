// The contract between the bench runner (main.ts) and a benchmark. A
// benchmark emits figures, logs progress, and registers the cleanup of
// whatever it creates right before creating it; the runner runs that cleanup
// in reverse order when the benchmark ends, fails or is interrupted.
//
// To add a group: write test/bench/<group>.ts exporting a list of Benchmarks
// named "<group>.<name>", and add it to GROUPS in registry.ts.
import { setTimeout as sleep } from 'node:timers/promises';

/** One measured figure: one JSON line on stdout. */
export interface Figure {
  /** snake_case with the unit last, e.g. launcher_start_to_qemu_ms_p50. */
  name: string;
  value: number;
  unit: string;
}

export interface BenchContext {
  emit(name: string, value: number, unit: string): void;
  /** Progress on stderr; stdout carries figures only. */
  log(msg: string): void;
  /** Runs when the benchmark ends, however it ends; the last registered runs first. Must be idempotent. */
  defer(what: string, cleanup: () => Promise<void> | void): void;
  /** Aborted on SIGINT/SIGTERM: waits stop and the benchmark unwinds into its cleanup. */
  readonly signal: AbortSignal;
  /** `--cycles N`, for the benchmarks that repeat something (leaks). */
  readonly cycles?: number;
  /** `--vms N`, for the benchmarks that start many VMs at once (boot-storm). */
  readonly vms?: number;
}

export interface Benchmark {
  /** "<group>.<name>"; `npm run bench -- <group>` runs the whole group. */
  name: string;
  /** One line for `npm run bench -- --list`. */
  description: string;
  /** Runs only when named (its group or itself): it takes long or loads the host for long. */
  heavy?: boolean;
  run(ctx: BenchContext): Promise<void>;
}

/** Polls `cond` with backoff (10 ms doubling to 250 ms) until it holds; for things with no notification, like a non-child exiting. */
export async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs: number, signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delayMs = 10; !(await cond()); delayMs = Math.min(delayMs * 2, 250)) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting until ${what}`);
    await sleep(delayMs, undefined, { signal });
  }
}

/** Rejects with the abort reason as soon as `signal` aborts; the work itself goes on, and cleanup deals with it. */
export function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

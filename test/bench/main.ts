// `npm run bench -- [--list | --machine | [--cycles N] [--vms N] <name…>]`: runs
// benchmarks and prints one JSON line {"name","value","unit"} per figure on
// stdout; progress goes to stderr. Names pick benchmarks ("launcher.start")
// or whole groups ("launcher"); none runs everything in registry.ts but the
// heavy ones (density, leaks, nodes). Exits 1 when a benchmark
// failed (its figures so far are still printed), 130 after Ctrl-C. Whatever a
// benchmark created is removed before the next one starts.
import { parseArgs } from 'node:util';
import type { BenchContext, Benchmark, Figure } from './bench.js';
import { machineFacts } from './machine.js';
import { BENCHMARKS, selectBenchmarks } from './registry.js';

function log(msg: string): void {
  process.stderr.write(`${new Date().toISOString()} bench: ${msg}\n`);
}

function emitFigure(f: Figure): void {
  if (!Number.isFinite(f.value)) throw new Error(`figure ${f.name} is not a finite number: ${f.value}`);
  process.stdout.write(JSON.stringify({ name: f.name, value: Math.round(f.value * 100) / 100, unit: f.unit }) + '\n');
}

/** Runs one benchmark, then its cleanup in reverse order of registration; false when either failed. */
async function runOne(b: Benchmark, signal: AbortSignal, counts: { cycles?: number; vms?: number }): Promise<boolean> {
  const cleanups: { what: string; fn: () => Promise<void> | void }[] = [];
  const ctx: BenchContext = {
    emit: (name, value, unit) => emitFigure({ name, value, unit }),
    log: (msg) => log(`[${b.name}] ${msg}`),
    defer: (what, fn) => void cleanups.push({ what, fn }),
    signal,
    ...counts,
  };
  let ok = true;
  const t0 = performance.now();
  log(`${b.name}: ${b.description}`);
  try {
    await b.run(ctx);
  } catch (err) {
    ok = false;
    log(`${b.name} FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  }
  if (cleanups.length > 0) log(`${b.name}: cleaning up ${cleanups.length} item(s)`);
  for (const c of cleanups.reverse()) {
    try {
      await c.fn();
    } catch (err) {
      ok = false;
      log(`${b.name}: cleanup of ${c.what} FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    }
  }
  log(`${b.name}: ${ok ? 'done' : 'failed'} in ${Math.round(performance.now() - t0)} ms`);
  return ok;
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      list: { type: 'boolean' },
      machine: { type: 'boolean' },
      cycles: { type: 'string' },
      vms: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const counts: { cycles?: number; vms?: number } = {};
  for (const flag of ['cycles', 'vms'] as const) {
    if (values[flag] === undefined) continue;
    const n = Number(values[flag]);
    if (!(Number.isInteger(n) && n > 0)) throw new Error(`--${flag}: a positive integer, got ${values[flag]}`);
    counts[flag] = n;
  }
  if (values.help) {
    process.stdout.write('usage: npm run bench -- [--list | --machine | [--cycles N] [--vms N] <benchmark or group>…]\n');
    return 0;
  }
  if (values.list) {
    for (const b of BENCHMARKS) process.stdout.write(`${b.name.padEnd(26)} ${b.heavy ? '(only when named) ' : ''}${b.description}\n`);
    return 0;
  }
  if (values.machine) {
    process.stdout.write(JSON.stringify(await machineFacts(), null, 2) + '\n');
    return 0;
  }
  const selected = selectBenchmarks(positionals);
  if (process.getuid?.() !== 0) throw new Error('the bench starts launchers, which need root (cgroups, namespaces)');

  const abort = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (abort.signal.aborted) return log(`${sig} again: still cleaning up`);
      log(`${sig}: stopping; cleaning up what the benchmark created`);
      abort.abort(new Error(`interrupted by ${sig}`));
    });
  }
  log(`machine: ${JSON.stringify(await machineFacts())}`);
  let failed = 0;
  for (const b of selected) {
    if (abort.signal.aborted) break;
    if (!(await runOne(b, abort.signal, counts))) failed++;
  }
  if (abort.signal.aborted) return 130;
  return failed > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    log(err instanceof Error ? err.message : String(err));
    process.exit(2);
  },
);

// Every benchmark `npm run bench` knows, in the order a full run takes them.
// A new group is a module exporting Benchmark[] named "<group>.<name>", added here.
import type { Benchmark } from './bench.js';
import { BURST_BENCHMARKS } from './burst.js';
import { CLI_BENCHMARKS } from './cli.js';
import { DENSITY_BENCHMARKS } from './density.js';
import { IMAGE_BENCHMARKS } from './images.js';
import { LAUNCHER_BENCHMARKS } from './launcher.js';
import { LEAK_BENCHMARKS } from './leaks.js';
import { MIGRATION_BENCHMARKS } from './migration.js';
import { NODE_BENCHMARKS } from './nodes.js';
import { POD_IMAGE_BENCHMARKS } from './pod-images.js';
import { POD_BENCHMARKS } from './pods.js';
import { RELAY_BENCHMARKS } from './relay.js';
import { STORAGE_CLONE_BENCHMARKS } from './storage-clone.js';
import { STORAGE_IMPORT_BENCHMARKS } from './storage-import.js';
import { STORAGE_IO_BENCHMARKS } from './storage-io.js';
import { STREAM_BENCHMARKS } from './streams.js';
import { TCG_CACHE_BENCHMARKS } from './tcg-cache.js';
import { VIRTCTL_BENCHMARKS } from './virtctl.js';

export const BENCHMARKS: readonly Benchmark[] = [
  ...CLI_BENCHMARKS,
  ...LAUNCHER_BENCHMARKS,
  ...POD_BENCHMARKS,
  ...IMAGE_BENCHMARKS,
  ...POD_IMAGE_BENCHMARKS,
  ...STORAGE_IMPORT_BENCHMARKS,
  ...STORAGE_CLONE_BENCHMARKS,
  ...STORAGE_IO_BENCHMARKS,
  ...STREAM_BENCHMARKS,
  ...RELAY_BENCHMARKS,
  ...MIGRATION_BENCHMARKS,
  ...VIRTCTL_BENCHMARKS,
  ...BURST_BENCHMARKS,
  ...DENSITY_BENCHMARKS,
  ...LEAK_BENCHMARKS,
  ...NODE_BENCHMARKS,
  ...TCG_CACHE_BENCHMARKS,
];

/**
 * The benchmarks the names pick, in registry order: a full name picks one
 * benchmark, a group name ("launcher") all of its group; no names pick all
 * but the heavy ones, which run only when named.
 * Throws listing the known names when a name picks nothing.
 */
export function selectBenchmarks(names: readonly string[], all: readonly Benchmark[] = BENCHMARKS): Benchmark[] {
  if (names.length === 0) return all.filter((b) => !b.heavy);
  const picks = (b: Benchmark, n: string): boolean => b.name === n || b.name.startsWith(`${n}.`);
  const unknown = names.filter((n) => !all.some((b) => picks(b, n)));
  if (unknown.length > 0) throw new Error(`unknown benchmark ${unknown.join(', ')}; known: ${all.map((b) => b.name).join(', ')}`);
  return all.filter((b) => names.some((n) => picks(b, n)));
}

// Summary statistics for benchmark samples.

/** Nearest-rank percentile (p in 0..100): the smallest sample with at least p% of samples at or below it. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) throw new Error('percentile of no samples');
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[rank - 1]!;
}

export function mean(samples: readonly number[]): number {
  if (samples.length === 0) throw new Error('mean of no samples');
  return samples.reduce((a, b) => a + b, 0) / samples.length;
}

export const KiB_PER_MiB = 1024;
export const BYTES_PER_MiB = 1024 * 1024;

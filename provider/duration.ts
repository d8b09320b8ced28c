// Durations written as Go writes them ("4h", "90s", "1h30m", "500ms"), for
// the flags the kubelet also takes as durations. Whole numbers only.
const UNIT_MS = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 } as const;
type Unit = keyof typeof UNIT_MS;

/** Milliseconds, or undefined when `text` is not such a duration. */
export function parseDuration(text: string): number | undefined {
  if (!/^(\d+(h|ms|m|s))+$/.test(text)) return undefined;
  let ms = 0;
  for (const [, n, unit] of text.matchAll(/(\d+)(h|ms|m|s)/g)) ms += Number(n) * UNIT_MS[unit as Unit];
  return ms;
}

/** The shortest such text for `ms` ("4h", "1h30m", "3s"). */
export function formatDuration(ms: number): string {
  let rest = ms;
  let text = '';
  for (const [unit, size] of Object.entries(UNIT_MS)) {
    const n = Math.floor(rest / size);
    if (n > 0) text += `${n}${unit}`;
    rest -= n * size;
  }
  return text || '0s';
}

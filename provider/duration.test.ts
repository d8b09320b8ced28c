import t from 'tap';
import { formatDuration, parseDuration } from './duration.js';

t.test('durations read as Go writes them, and write back the same way', async (t) => {
  t.same(['4h', '3s', '1h30m', '90s', '500ms', '1m1ms', '', '4', '1.5h', '-3s', '3 s', 'h'].map(parseDuration), [
    14_400_000,
    3000,
    5_400_000,
    90_000,
    500,
    60_001,
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
  ]);
  t.same([14_400_000, 3000, 5_400_000, 90_000, 1500, 0].map(formatDuration), ['4h', '3s', '1h30m', '1m30s', '1s500ms', '0s']);
});

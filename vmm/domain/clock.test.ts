import t from 'tap';
import { configureClock } from './clock.js';
import { applyBuilder, testSpec } from '../testing/specs.js';
import type { VmSpec } from '../spec.js';

const clockCases: { name: string; spec: Partial<VmSpec>; offset: string }[] = [
  { name: 'UTC by default', spec: {}, offset: 'utc' },
  { name: 'UTC when asked', spec: { clock: { utc: true } }, offset: 'utc' },
  { name: 'local time when UTC is off', spec: { clock: { utc: false } }, offset: 'localtime' },
];

for (const c of clockCases) {
  t.test(`${c.name}`, async (t) => {
    t.same(applyBuilder(configureClock, testSpec(c.spec)).clock, {
      $: { offset: c.offset },
      timer: [{ $: { name: 'rtc', tickpolicy: 'catchup' } }, { $: { name: 'pit', tickpolicy: 'delay' } }, { $: { name: 'hpet', present: 'no' } }],
    });
  });
}

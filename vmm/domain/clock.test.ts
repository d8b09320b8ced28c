import t from 'tap';
import { configureClock } from './clock.js';
import { applyBuilder, testSpec } from '../testing/specs.js';
import type { VmSpec } from '../spec.js';
import type { ClockDraft } from './draft.js';

const clockCases: { name: string; spec: Partial<VmSpec>; attrs: ClockDraft['$'] }[] = [
  { name: 'UTC by default', spec: {}, attrs: { offset: 'utc' } },
  { name: 'UTC when asked', spec: { clock: { kind: 'utc' } }, attrs: { offset: 'utc' } },
  {
    name: 'UTC shifted by an offset',
    spec: { clock: { kind: 'utc', offsetSeconds: -3600 } },
    attrs: { offset: 'utc', adjustment: '-3600' },
  },
  { name: 'the host’s local time', spec: { clock: { kind: 'localtime' } }, attrs: { offset: 'localtime' } },
  {
    name: 'a named time zone',
    spec: { clock: { kind: 'timezone', timezone: 'Europe/Paris' } },
    attrs: { offset: 'timezone', timezone: 'Europe/Paris' },
  },
];

for (const c of clockCases) {
  t.test(`${c.name}`, async (t) => {
    t.same(applyBuilder(configureClock, testSpec(c.spec)).clock, {
      $: c.attrs,
      timer: [
        { $: { name: 'rtc', tickpolicy: 'catchup' } },
        { $: { name: 'pit', tickpolicy: 'delay' } },
        { $: { name: 'hpet', present: 'no' } },
      ],
    });
  });
}

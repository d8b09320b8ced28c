// Guest clock. The timers are virt-install's defaults: the RTC catches up and
// the PIT delays after the host descheduled the guest (common under TCG), and
// the HPET is off because it is slow to emulate.
import type { DomainBuilder } from './draft.js';

export const configureClock: DomainBuilder = (spec, _host, _runtime, draft) => {
  draft.clock = {
    $: { offset: spec.clock?.utc === false ? 'localtime' : 'utc' },
    timer: [
      { $: { name: 'rtc', tickpolicy: 'catchup' } },
      { $: { name: 'pit', tickpolicy: 'delay' } },
      { $: { name: 'hpet', present: 'no' } },
    ],
  };
};

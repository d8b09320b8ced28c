// Guest clock. The timers are virt-install's defaults: the RTC catches up and
// the PIT delays after the host descheduled the guest (common under TCG), and
// the HPET is off because it is slow to emulate.
import type { GuestClock } from '../spec.js';
import type { ClockDraft, DomainBuilder } from './draft.js';

/** libvirt's <clock> attributes: a numeric adjustment on utc makes libvirt start the RTC that far from UTC. */
function offsetAttributes(clock: GuestClock | undefined): ClockDraft['$'] {
  switch (clock?.kind) {
    case 'localtime':
      return { offset: 'localtime' };
    case 'timezone':
      return { offset: 'timezone', timezone: clock.timezone };
    default:
      return clock?.offsetSeconds ? { offset: 'utc', adjustment: String(clock.offsetSeconds) } : { offset: 'utc' };
  }
}

export const configureClock: DomainBuilder = (spec, _host, _runtime, draft) => {
  draft.clock = {
    $: offsetAttributes(spec.clock),
    timer: [
      { $: { name: 'rtc', tickpolicy: 'catchup' } },
      { $: { name: 'pit', tickpolicy: 'delay' } },
      { $: { name: 'hpet', present: 'no' } },
    ],
  };
};

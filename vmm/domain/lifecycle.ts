// What QEMU does on guest power events. Power-off and crash end the domain so
// the launcher sees the exit and the provider decides about restarts; a guest
// reboot stays inside the same domain.
import type { DomainBuilder } from './draft.js';

export const configureLifecycle: DomainBuilder = (_spec, _host, _runtime, draft) => {
  draft.on_poweroff = 'destroy';
  draft.on_reboot = 'restart';
  draft.on_crash = 'destroy';
};

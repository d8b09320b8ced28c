// Guest RAM, fixed at start (no balloon sizing, no hotplug).
import type { DomainBuilder } from './draft.js';

export const configureMemory: DomainBuilder = (spec, _host, _runtime, draft) => {
  draft.memory = { $: { unit: 'MiB' }, _: spec.memoryMiB };
};

// QEMU iothreads (libvirt's <iothreads>): event loops of their own beside
// QEMU's main loop, which the virtio disks that name one (disks.ts) run their
// requests on, as KubeVirt's IOThreadsDomainConfigurator declares them.
import type { DomainBuilder } from './draft.js';

export const configureIoThreads: DomainBuilder = (spec, _host, _runtime, draft) => {
  if (spec.ioThreads !== undefined) draft.iothreads = spec.ioThreads;
};

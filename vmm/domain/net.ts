// Network interfaces as plain ethernet taps. The provider's network plumbing
// creates the tap and owns its wiring (masquerade or bridge), so libvirt is
// told managed='no' and only attaches to it.
import type { DomainBuilder, InterfaceDraft } from './draft.js';

export const configureNet: DomainBuilder = (spec, _host, _runtime, draft) => {
  for (const nic of spec.interfaces) {
    const iface: InterfaceDraft = {
      $: { type: 'ethernet' },
      mac: { $: { address: nic.mac } },
      ...(nic.tapDevice ? { target: { $: { dev: nic.tapDevice, managed: 'no' as const } } } : {}),
      model: { $: { type: nic.model ?? 'virtio' } },
      ...(nic.bootOrder !== undefined ? { boot: { $: { order: nic.bootOrder } } } : {}),
      alias: { $: { name: `ua-net-${nic.name}` } },
    };
    draft.devices.interface.push(iface);
  }
};

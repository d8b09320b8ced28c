import t from 'tap';
import { configureNet } from './net.js';
import { applyBuilder, testSpec } from '../testing/specs.js';
import type { InterfaceSpec } from '../spec.js';

const cases: { name: string; nic: InterfaceSpec; want: object }[] = [
  {
    name: 'an unmanaged tap with a virtio model by default',
    nic: { name: 'default', binding: 'masquerade', mac: '52:54:00:12:34:56', tapDevice: 'vk-0b6a3c1e' },
    want: {
      $: { type: 'ethernet' },
      mac: { $: { address: '52:54:00:12:34:56' } },
      target: { $: { dev: 'vk-0b6a3c1e', managed: 'no' } },
      model: { $: { type: 'virtio' } },
      alias: { $: { name: 'ua-net-default' } },
    },
  },
  {
    name: 'no target before the plumbing named a tap, and the model from the spec',
    nic: { name: 'lan', binding: 'bridge', mac: '52:54:00:aa:bb:cc', model: 'e1000' },
    want: {
      $: { type: 'ethernet' },
      mac: { $: { address: '52:54:00:aa:bb:cc' } },
      model: { $: { type: 'e1000' } },
      alias: { $: { name: 'ua-net-lan' } },
    },
  },
];

for (const c of cases) {
  t.test(c.name, async (t) => {
    t.same(applyBuilder(configureNet, testSpec({ interfaces: [c.nic] })).devices.interface, [c.want]);
  });
}

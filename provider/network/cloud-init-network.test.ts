import t from 'tap';
import type { DiskSpec } from '../../vmm/spec.js';
import { networkConfigV2, withNetworkConfig } from './cloud-init-network.js';

const address = {
  mac: '52:54:00:aa:bb:cc',
  address: '10.244.0.7/24',
  gateway: '10.244.0.1',
  dns: { nameservers: ['192.0.2.53'], searches: [] },
};

t.test('network-config v2 names the NIC by MAC with its address, default route and DNS', async (t) => {
  t.same(JSON.parse(networkConfigV2(address)), {
    version: 2,
    ethernets: {
      default: {
        match: { macaddress: '52:54:00:aa:bb:cc' },
        addresses: ['10.244.0.7/24'],
        routes: [{ to: '0.0.0.0/0', via: '10.244.0.1' }],
        nameservers: { addresses: ['192.0.2.53'] },
      },
    },
  });
  t.notMatch(networkConfigV2({ ...address, dns: { nameservers: [], searches: [] } }), /nameservers/, 'no DNS, no nameservers');
  t.same(
    JSON.parse(networkConfigV2({ ...address, dns: { nameservers: ['10.96.0.10'], searches: ['ns.svc.cluster.local', 'cluster.local'] } }))
      .ethernets.default.nameservers,
    { addresses: ['10.96.0.10'], search: ['ns.svc.cluster.local', 'cluster.local'] },
    'search domains too',
  );
});

t.test('only cloud-init seeds without a network-config get one', async (t) => {
  const disks: DiskSpec[] = [
    { name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'empty', sizeMiB: 1 } },
    { name: 'seed', device: 'cdrom', bus: 'sata', source: { kind: 'cloudInit', userData: '#cloud-config\n', metaData: '{}' } },
    {
      name: 'mine',
      device: 'disk',
      bus: 'virtio',
      source: { kind: 'cloudInit', userData: '', metaData: '{}', networkConfig: 'version: 1\n' },
    },
  ];
  const out = withNetworkConfig(disks, address);
  t.same(out[0], disks[0], 'other disks untouched');
  t.same(out[1]!.source, { ...disks[1]!.source, networkConfig: networkConfigV2(address) }, 'the seed gets the address');
  t.same(out[2], disks[2], "the user's network-config wins");
});

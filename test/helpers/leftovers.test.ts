// The leak audit's footprint: what it counts as left, from an agent's files.
import path from 'node:path';
import t from 'tap';
import { hostFootprint, leftSince } from './leftovers.js';

t.test('what is left is what the later footprint has that the earlier had not, by kind', async (t) => {
  t.same(
    leftSince({ file: ['/s/a', '/s/b'], cgroup: [] }, { file: ['/s/a', '/s/c'], cgroup: ['pids/vkvm/x'], 'network namespace': ['vkvm-y'] }),
    ['file: /s/c', 'cgroup: pids/vkvm/x', 'network namespace: vkvm-y'],
    'new lines only, gone ones are no leak',
  );
});

t.test(
  "an agent's files: IPAM addresses, DHCP leases neither released nor dropped by a restart, every file but its log and image store",
  async (t) => {
    const stateDir = t.testdir({
      'agent.log': '',
      images: { blobs: { x: '' } },
      vms: { u1: { 'launcher.log': '' } },
      network: {
        'leases.json': JSON.stringify({ version: 1, cidr: '10.0.0.0/24', leases: { u1: '10.0.0.2' } }),
        'dnsmasq.log': [
          'Nov 24 05:59:00 dnsmasq-dhcp[1]: DHCPACK(vkb0) 10.0.0.9 52:54:00:00:00:09',
          'Nov 24 05:59:30 dnsmasq[2]: started, version 2.90 DNS disabled',
          'Nov 24 06:00:00 dnsmasq-dhcp[2]: DHCPACK(vkb0) 10.0.0.2 52:54:00:00:00:01',
          'Nov 24 06:00:01 dnsmasq-dhcp[1]: DHCPACK(vkb0) 10.0.0.3 52:54:00:00:00:02',
          'Nov 24 06:00:02 dnsmasq-dhcp[1]: DHCPRELEASE(vkb0) 10.0.0.3 52:54:00:00:00:02',
          '',
        ].join('\n'),
      },
    });
    const fp = await hostFootprint({ stateDir, runDir: path.join(stateDir, 'run'), bridge: 'vkb-no-such-bridge' });
    t.same(
      { ipam: fp['IPAM address'], dhcp: fp['DHCP lease'], files: fp.file!.map((f) => path.relative(stateDir, f)) },
      {
        ipam: ['10.0.0.2 held by u1'],
        dhcp: ['10.0.0.2 52:54:00:00:00:01'],
        files: ['network', 'network/dnsmasq.log', 'network/leases.json', 'vms', 'vms/u1', 'vms/u1/launcher.log'],
      },
    );
  },
);

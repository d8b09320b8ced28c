import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { DNSMASQ, ensureDnsmasq, renderDnsmasqConf, renderVmDhcpOptions, stopDnsmasq } from './dnsmasq.js';
import { run } from './host.js';
import { netmaskOf } from './node-network.js';
import { parseIpv4Range } from './ipv4.js';

t.test('the DHCP config answers static leases only, on one interface, with DNS off, and runs the lease script', async (t) => {
  const range = parseIpv4Range('10.244.3.0/24', 'podCIDR');
  const conf = renderDnsmasqConf(
    {
      interface: 'vkvm0',
      network: '10.244.3.0',
      netmask: netmaskOf(range),
      router: '10.244.3.1',
      dnsServers: ['192.0.2.53'],
      hostsDir: '/var/lib/vkvm/network/dhcp-hosts',
      leaseTime: '1h',
      leaseScript: '/var/lib/vkvm/network/dhcp-script',
    },
    '/var/lib/vkvm/network/dnsmasq.pid',
  );
  t.same(conf.split('\n'), [
    '# written by the vkvm node agent',
    'interface=vkvm0',
    'except-interface=lo',
    'bind-dynamic',
    'port=0',
    'leasefile-ro',
    'dhcp-authoritative',
    'dhcp-range=10.244.3.0,static,255.255.255.0,1h',
    'dhcp-option=option:router,10.244.3.1',
    'dhcp-option=option:dns-server,192.0.2.53',
    'dhcp-hostsdir=/var/lib/vkvm/network/dhcp-hosts',
    'dhcp-script=/var/lib/vkvm/network/dhcp-script',
    'pid-file=/var/lib/vkvm/network/dnsmasq.pid',
    'log-facility=/var/lib/vkvm/network/dnsmasq.log',
    '',
  ]);
  t.equal(netmaskOf(parseIpv4Range('10.1.0.0/29', 'x')), '255.255.255.248');
});

t.test("a VM's resolver options are tagged lines for the options directory; search domains in option 119", async (t) => {
  t.equal(
    renderVmDhcpOptions('vm1', { nameservers: ['10.96.0.10', '192.0.2.53'], searches: ['ns.svc.cluster.local', 'cluster.local'] }),
    'tag:vm1,option:dns-server,10.96.0.10,192.0.2.53\ntag:vm1,option:domain-search,ns.svc.cluster.local,cluster.local\n',
  );
  t.equal(renderVmDhcpOptions('vm1', { nameservers: [], searches: [] }), '', 'nothing of its own: the defaults');
  const conf = renderDnsmasqConf(
    {
      interface: 'br',
      network: '10.0.0.0',
      netmask: '255.255.255.0',
      router: '10.0.0.1',
      dnsServers: [],
      searches: ['a.example'],
      optsDir: '/d/opts',
      leaseTime: '1h',
    },
    '/d/p.pid',
  );
  t.match(conf, /^dhcp-option=option:domain-search,a\.example$/m);
  t.match(conf, /^dhcp-optsdir=\/d\/opts$/m);
  t.notMatch(conf, /dns-server/, 'no nameserver line without nameservers');
});

t.test('other nodes’ ranges of VMs that migrated here are served on the same interface, each with its own router', async (t) => {
  const conf = renderDnsmasqConf(
    {
      interface: 'vkvm0',
      network: '10.244.3.0',
      netmask: '255.255.255.0',
      router: '10.244.3.1',
      dnsServers: [],
      leaseTime: '1h',
      sharedNetworks: [{ network: '10.244.1.0', netmask: '255.255.255.0', router: '10.244.1.1' }],
    },
    '/x/dnsmasq.pid',
  );
  t.match(
    conf,
    'dhcp-option=option:router,10.244.3.1\n' +
      'shared-network=vkvm0,10.244.1.1\n' +
      'dhcp-range=set:home-10-244-1-0,10.244.1.0,static,255.255.255.0,1h\n' +
      'dhcp-option=tag:home-10-244-1-0,option:router,10.244.1.1\n',
  );
});

t.test('a stray instance of the same config (a start that raced a stop) is ended by the next ensure and by stop', async (t) => {
  const dir = t.testdir();
  const i = { confFile: join(dir, 'dnsmasq.conf'), pidFile: join(dir, 'dnsmasq.pid') };
  // No DHCP and no DNS: an instance that only runs.
  const conf = `port=0\ninterface=lo\npid-file=${i.pidFile}\n`;
  const mains = async () =>
    (await run(['pgrep', '-f', '-x', `${DNSMASQ} --conf-file=${i.confFile}`]).catch(() => '')).split('\n').filter(Boolean).length;
  t.teardown(() => stopDnsmasq(i));
  const first = await ensureDnsmasq(i, conf);
  t.equal(await ensureDnsmasq(i, conf), first, 'running alone with its config: kept');
  // A second start of the same config, as a race leaves it: the pid file now names the stray.
  await run([DNSMASQ, `--conf-file=${i.confFile}`]);
  t.equal(await mains(), 2, 'two instances run');
  const kept = await ensureDnsmasq(i, conf);
  t.equal(await mains(), 1, 'ensure ends both and starts one');
  t.equal(Number((await readFile(i.pidFile, 'utf8')).trim()), kept, 'the pid file names it');
  await run([DNSMASQ, `--conf-file=${i.confFile}`]);
  await stopDnsmasq(i);
  t.equal(await mains(), 0, 'stop ends every instance of the config');
});

// A VM's namespace: the commands and the NAT script as pure functions, then
// on the real host — both bindings built on a scratch bridge (no VM), a
// build left half-way rebuilt, and removal leaving nothing.
import { randomBytes, randomUUID } from 'node:crypto';
import { access, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import type { InterfaceSpec } from '../../vmm/spec.js';
import { hostLink, ipBatchRemoval, links, run } from './host.js';
import {
  ensureVmNetwork,
  MASQUERADE_TABLE,
  masqueradeGatewayMac,
  namespaceCommands,
  podIfaceMac,
  readVmPort,
  removeVmNetwork,
  renderMasqueradeNat,
  vmNetworkNames,
  type VmNetworkPlan,
} from './vm-network.js';

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

t.test("eth0's MAC follows from the VM uid: stable, unicast and locally administered", async (t) => {
  const mac = podIfaceMac('8d7a9a2e-0c1b-4a55-9f3e-1d2c3b4a5f60');
  t.equal(podIfaceMac('8d7a9a2e-0c1b-4a55-9f3e-1d2c3b4a5f60'), mac, 'the same uid, the same MAC');
  t.not(podIfaceMac(randomUUID()), mac, 'another uid, another MAC');
  t.match(mac, /^02(:[0-9a-f]{2}){5}$/);
});

t.test('the namespace commands per binding', async (t) => {
  const plan = { podIP: '10.244.0.7', prefixLength: 24, gateway: '10.244.0.1' };
  t.same(namespaceCommands({ ...plan, iface: { name: 'default', binding: 'bridge', mac: '52:54:00:00:00:01' } }), [
    ['link', 'set', 'lo', 'up'],
    ['tuntap', 'add', 'dev', 'tap0', 'mode', 'tap'],
    ['link', 'add', 'k6t-eth0', 'type', 'bridge'],
    ['link', 'set', 'eth0', 'master', 'k6t-eth0'],
    ['link', 'set', 'tap0', 'master', 'k6t-eth0'],
    ['link', 'set', 'k6t-eth0', 'up'],
    ['link', 'set', 'eth0', 'up'],
    ['link', 'set', 'tap0', 'up'],
  ]);
  t.same(namespaceCommands({ ...plan, iface: { name: 'default', binding: 'masquerade', mac: '52:54:00:00:00:01' } }), [
    ['link', 'set', 'lo', 'up'],
    ['tuntap', 'add', 'dev', 'tap0', 'mode', 'tap'],
    ['addr', 'add', '10.244.0.7/24', 'dev', 'eth0'],
    ['link', 'set', 'eth0', 'up'],
    ['route', 'add', 'default', 'via', '10.244.0.1'],
    ['link', 'set', 'tap0', 'address', '02:b5:53:d7:47:a7'],
    ['addr', 'add', '10.0.2.1/24', 'dev', 'tap0'],
    ['link', 'set', 'tap0', 'up'],
  ]);
  t.same(
    [masqueradeGatewayMac('52:54:00:00:00:01'), masqueradeGatewayMac('52:54:00:00:00:02'), masqueradeGatewayMac('52:54:00:00:00:0A')],
    ['02:b5:53:d7:47:a7', '02:c4:fc:54:38:ab', masqueradeGatewayMac('52:54:00:00:00:0a')],
    "a masquerade guest's gateway MAC follows from its own MAC alone: the same on every node it migrates to",
  );
});

t.test('the masquerade NAT forwards the listed ports, or all of them, and masquerades the guest subnet', async (t) => {
  t.equal(
    renderMasqueradeNat([
      { protocol: 'TCP', port: 80 },
      { protocol: 'UDP', port: 53 },
    ]),
    `table ip vkvm-masquerade {
\tchain prerouting {
\t\ttype nat hook prerouting priority dstnat; policy accept;
\t\tiifname "eth0" tcp dport 80 dnat to 10.0.2.2
\t\tiifname "eth0" udp dport 53 dnat to 10.0.2.2
\t}
\tchain postrouting {
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\tip saddr 10.0.2.0/24 oifname "eth0" masquerade
\t}
}
`,
  );
  t.match(renderMasqueradeNat(undefined), /\t\tiifname "eth0" dnat to 10\.0\.2\.2\n\t\}/, 'no ports listed: all of them');
  t.same(renderMasqueradeNat([]), renderMasqueradeNat(undefined), 'an empty list is none');
  for (const port of [0, 65536, 1.5, Number.NaN]) {
    t.throws(() => renderMasqueradeNat([{ protocol: 'TCP', port }]), /cannot forward port/, `port ${port} refused`);
  }
});

/** What is left of a VM's network on the host: its namespace, its veth, its port record. */
async function remains(uid: string, dir: string): Promise<{ netns: boolean; veth: boolean; port: boolean }> {
  const names = vmNetworkNames(uid);
  return { netns: await exists(names.netnsPath), veth: (await hostLink(names.hostVeth)) !== undefined, port: !!(await readVmPort(dir)) };
}

t.test('on the host: both bindings are built on the node bridge, rebuilt when left half-way, and removed whole', async (t) => {
  const bridge = `vkv${randomBytes(3).toString('hex')}`;
  const root = await mkdtemp(path.join(tmpdir(), 'vkvm-vm-network-'));
  await run(['ip', 'link', 'add', bridge, 'type', 'bridge']);
  const made: Array<{ uid: string; dir: string }> = [];
  t.teardown(async () => {
    for (const m of made) await removeVmNetwork(m.uid, m.dir);
    await ipBatchRemoval([['link', 'del', bridge]], /Cannot find device/);
    await rm(root, { recursive: true, force: true });
  });
  const plan = (binding: InterfaceSpec['binding'], podIP: string): VmNetworkPlan => {
    const uid = randomUUID();
    const dir = path.join(root, uid);
    made.push({ uid, dir });
    return {
      uid,
      iface: { name: 'default', binding, mac: '52:54:00:aa:bb:cc', tapDevice: 'tap0', forwardPorts: [{ protocol: 'TCP', port: 8080 }] },
      podIP,
      prefixLength: 24,
      gateway: '10.99.0.1',
      dns: { nameservers: [], searches: [] },
      nodeBridge: bridge,
      dir,
    };
  };

  const br = plan('bridge', '10.99.0.7');
  const names = await ensureVmNetwork(br);
  const inside = await links(names.netnsPath);
  t.match(
    {
      veth: await hostLink(names.hostVeth),
      eth0: inside.get('eth0'),
      tap0: inside.get('tap0'),
      inner: inside.get('k6t-eth0'),
      port: await readVmPort(br.dir),
    },
    {
      veth: { master: bridge, operstate: /UP|LOWERLAYERDOWN|DOWN/ },
      eth0: { address: podIfaceMac(br.uid), master: 'k6t-eth0' },
      tap0: { master: 'k6t-eth0' },
      inner: { ifname: 'k6t-eth0' },
      port: { veth: names.hostVeth, mac: '52:54:00:aa:bb:cc', ip: '10.99.0.7' },
    },
    "bridge: the host veth on the node bridge, eth0 and the tap on the namespace's bridge, the guest's MAC recorded",
  );

  const masq = plan('masquerade', '10.99.0.8');
  const mnames = await ensureVmNetwork(masq);
  const inNs = (...argv: string[]) => run(['nsenter', `--net=${mnames.netnsPath}`, '--', ...argv]);
  t.match(
    {
      addrs: await inNs('ip', '-4', '-br', 'addr'),
      route: await inNs('ip', 'route', 'show', 'default'),
      forwarding: (await inNs('cat', '/proc/sys/net/ipv4/ip_forward')).trim(),
      nat: await inNs('nft', 'list', 'table', 'ip', MASQUERADE_TABLE),
      port: await readVmPort(masq.dir),
      dhcp: (await readFile(path.join(masq.dir, 'dnsmasq.conf'), 'utf8')).includes(
        `dhcp-host=52:54:00:aa:bb:cc,set:vm-${masq.uid},10.0.2.2`,
      ),
    },
    {
      addrs: /eth0@\S+\s+\S+\s+10\.99\.0\.8\/24[\s\S]*tap0\s+\S+\s+10\.0\.2\.1\/24/,
      route: /default via 10\.99\.0\.1 dev eth0/,
      forwarding: '1',
      nat: /tcp dport 8080 dnat to 10\.0\.2\.2[\s\S]*ip saddr 10\.0\.2\.0\/24 oifname "eth0" masquerade/,
      port: { veth: mnames.hostVeth, mac: podIfaceMac(masq.uid), ip: '10.99.0.8' },
      dhcp: true,
    },
    'masquerade: eth0 holds the pod address, forwarding on, the listed port forwarded, the guest served 10.0.2.2, its port sends as eth0',
  );

  t.same(
    { built: names.portRecorded, again: (await ensureVmNetwork(br)).portRecorded },
    { built: true, again: false },
    'a port record written is reported (the port filter must follow), an unchanged namespace is not',
  );

  // A crash after the namespace was made but before it was marked ready: the next ensure starts over.
  await rm(path.join(br.dir, 'ready'));
  await run(['ip', '-n', names.netns, 'link', 'del', 'tap0']);
  const rebuilt = await ensureVmNetwork(br);
  t.same(
    { tap0: (await links(names.netnsPath)).has('tap0'), portRecorded: rebuilt.portRecorded },
    { tap0: true, portRecorded: true },
    'a namespace never marked ready is rebuilt whole, its port recorded again',
  );

  for (const p of [br, masq]) await removeVmNetwork(p.uid, p.dir);
  t.same(
    await Promise.all([br, masq].map((p) => remains(p.uid, p.dir))),
    [
      { netns: false, veth: false, port: false },
      { netns: false, veth: false, port: false },
    ],
    'removal leaves no namespace, veth or record',
  );
  t.notOk(
    (await run(['ps', '-eo', 'args'])).includes(path.join(masq.dir, 'dnsmasq.conf')),
    "the masquerade VM's DHCP server is gone with it",
  );
  await removeVmNetwork(br.uid, br.dir);
  t.pass('removing again is a no-op');
});

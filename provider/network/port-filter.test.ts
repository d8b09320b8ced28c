// The port filter: its nft script as a pure function, then on the real host —
// two namespaces on a node bridge (as two VMs' ports), one sending what a
// spoofing guest would (rawsend), with the filter and, as a control that the
// frames do harm, without it.
import { randomBytes, randomInt } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { pino } from 'pino';
import { arpClaim, BROADCAST, dhcpDecline, routerAdvertisement, udp4 } from '../../test/helpers/frames.js';
import { buildRawsend } from '../../test/helpers/rawsend.js';
import { run } from './host.js';
import { gatewayOf, intToIp, parseIpv4Range } from './ipv4.js';
import { bridgeMac, NodeNetwork } from './node-network.js';
import { PortFilter, portFilterTable, removePortFilter, renderPortFilter, type VmPort } from './port-filter.js';

t.test('the script replaces the table whole: one chain per port, dispatched by the port name', async (t) => {
  const port = { veth: 'vh0123456789ab', mac: '52:54:00:12:34:56', ip: '10.244.0.7' };
  t.equal(
    renderPortFilter('vkvm-vkvm0', '02:11:22:33:44:55', [port]),
    `table bridge vkvm-vkvm0
delete table bridge vkvm-vkvm0
table bridge vkvm-vkvm0 {
\tchain ports {
\t\ttype filter hook prerouting priority filter; policy accept;
\t\tiifname vmap { "vh0123456789ab" : jump port-vh0123456789ab }
\t}

\tchain port-vh0123456789ab {
\t\tether saddr != 52:54:00:12:34:56 counter drop comment "another MAC"
\t\tether type 0x8035 accept
\t\tarp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp saddr ether 52:54:00:12:34:56 arp saddr ip { 10.244.0.7, 0.0.0.0 } accept
\t\tether type arp counter drop comment "ARP for another address"
\t\tudp sport 67 counter drop comment "DHCP server message"
\t\tudp dport 67 @th,288,48 != 0x525400123456 counter drop comment "DHCP for another MAC"
\t\tudp dport 67 ip frag-off & 0x3fff != 0 counter drop comment "fragmented DHCP"
\t\tip saddr 0.0.0.0 ip daddr 255.255.255.255 udp sport 68 udp dport 67 accept
\t\tip saddr 10.244.0.7 accept
\t\tether type ip counter drop comment "IPv4 from another address"
\t\ticmpv6 type nd-router-advert counter drop comment "IPv6 router advertisement"
\t\tcounter drop comment "neither IPv4 nor ARP"
\t}

\tchain to-absent-macs {
\t\ttype filter hook prerouting priority filter + 10; policy accept;
\t\tiifname { "vh0123456789ab" } meta pkttype != { broadcast, multicast } ether daddr != { 02:11:22:33:44:55, 52:54:00:12:34:56 } ether daddr set 02:11:22:33:44:55 meta pkttype set host counter comment "to a MAC no port holds: routed"
\t}
}
`,
  );
  const other = { veth: 'vh00000000000', mac: '02:00:00:00:00:01', ip: '10.244.0.8' };
  t.match(
    renderPortFilter('vkvm-vkvm0', '02:11:22:33:44:55', [port, other]),
    /iifname vmap \{ "vh00000000000" : jump port-vh00000000000, "vh0123456789ab" : jump port-vh0123456789ab \}/,
    'ports in name order, whatever the order given',
  );
  t.notMatch(
    renderPortFilter('vkvm-vkvm0', '02:11:22:33:44:55', []),
    /vmap|chain port-|to-absent-macs/,
    'no ports: the table and its base chain, nothing else',
  );
  t.throws(() => renderPortFilter('vkvm-vkvm0', 'br', [port]), /cannot filter the bridge/, 'a bridge MAC that is no MAC is refused');
  for (const bad of [
    { veth: 'vh x' },
    { mac: '52:54:00:12:34:56 accept' },
    { mac: '52:54:00:12:34:5G' },
    { ip: '10.244.0.256' },
    { ip: '10.244.0.7 } accept' },
  ]) {
    t.throws(
      () => renderPortFilter('vkvm-vkvm0', '02:11:22:33:44:55', [{ ...port, ...bad }]),
      /cannot filter port/,
      `refused: ${JSON.stringify(bad)}`,
    );
  }
});

interface Ns {
  name: string;
  /** The host end of its veth: the port on the bridge. */
  veth: string;
  mac: string;
  ip: string;
  exec(...argv: string[]): Promise<string>;
}

/** A namespace whose eth0 sits on the bridge with a fixed MAC and address, as a VM's would. */
async function namespace(t: Test, bridge: string, id: string, mac: string, cidr: string): Promise<Ns> {
  const name = `${bridge}-${id}`;
  const veth = `${bridge}${id}`;
  await run(['ip', 'netns', 'add', name]);
  t.teardown(() => run(['ip', 'netns', 'del', name]).catch(() => undefined));
  await run(['ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', name]);
  await run(['ip', 'link', 'set', veth, 'master', bridge, 'up']);
  const exec = (...argv: string[]) => run(['nsenter', `--net=/run/netns/${name}`, '--', ...argv]);
  await exec('ip', 'link', 'set', 'eth0', 'address', mac, 'up');
  await exec('ip', 'addr', 'add', cidr, 'dev', 'eth0');
  // A gratuitous ARP replaces an entry at once anyway; a reply only after locktime. Neither may depend on timing.
  await exec('sysctl', '-q', '-w', 'net.ipv4.neigh.eth0.locktime=0');
  return { name, veth, mac, ip: cidr.split('/')[0]!, exec };
}

async function until<T>(what: string, probe: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  let last: T | undefined;
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    last = await probe();
    if (done(last)) return last;
  }
  throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last)}`);
}

const neighbour = async (ip: string, dev: string, exec = (...a: string[]) => run(a)) =>
  (JSON.parse(await exec('ip', '-j', 'neigh', 'show', ip, 'dev', dev)) as Array<{ lladdr?: string }>)[0]?.lladdr;

const fdbPort = async (bridge: string, mac: string) =>
  (JSON.parse(await run(['bridge', '-j', 'fdb', 'show', 'br', bridge])) as Array<{ mac: string; ifname: string }>).find(
    (e) => e.mac === mac,
  )?.ifname;

/** Packets of a port's drop rules, by comment. */
async function dropCounts(table: string, veth: string): Promise<Record<string, number>> {
  const out = JSON.parse(await run(['nft', '-j', 'list', 'chain', 'bridge', table, `port-${veth}`])) as {
    nftables: Array<{ rule?: { comment?: string; expr: Array<{ counter?: { packets: number } }> } }>;
  };
  return Object.fromEntries(
    out.nftables.flatMap((o) => (o.rule?.comment ? [[o.rule.comment, o.rule.expr.find((e) => e.counter)?.counter?.packets ?? 0]] : [])),
  );
}

t.test('on the host: a port sends only as itself; without the filter the same frames poison', async (t) => {
  const suffix = randomBytes(2).toString('hex');
  const bridge = `vkf${suffix}`;
  const range = parseIpv4Range(`10.${100 + randomInt(100)}.${randomInt(256)}.0/28`, 'test range');
  const gw = gatewayOf(range);
  const dir = await mkdtemp(path.join(tmpdir(), 'vkvm-port-filter-'));
  const log = pino({ level: 'silent' });
  const net = new NodeNetwork({ bridge, dir, log });
  t.teardown(async () => {
    await net.remove();
    await rm(dir, { recursive: true, force: true });
  });
  await net.ensure(range, []);
  await run(['sysctl', '-q', '-w', `net.ipv4.neigh.${bridge}.locktime=0`]);
  const rawsend = await buildRawsend(t);
  const a = await namespace(t, bridge, 'a', '02:00:00:00:00:0a', `${intToIp(range.network + 2)}/28`);
  const b = await namespace(t, bridge, 'b', '02:00:00:00:00:0b', `${intToIp(range.network + 3)}/28`);
  await net.addDhcpHost('b', b.mac, b.ip);
  const silent = '02:00:00:00:00:0c';
  const ports: VmPort[] = [a, b].map(({ veth, mac, ip }) => ({ veth, mac, ip }));
  const table = portFilterTable(bridge);
  const dhcpLog = () => readFile(path.join(dir, 'dnsmasq.log'), 'utf8').catch(() => '');
  const lease = () =>
    b.exec('busybox', 'udhcpc', '-i', 'eth0', '-q', '-n', '-t', '4', '-T', '1', '-s', '/bin/true').then(
      () => 'leased',
      (err: Error) => err.message,
    );

  const listener = createSocket('udp4');
  const received: Array<{ from: string; text: string }> = [];
  listener.on('message', (msg, rinfo) => received.push({ from: rinfo.address, text: msg.toString() }));
  await new Promise<void>((resolve) => listener.bind(0, gw, resolve));
  t.teardown(() => listener.close());
  const port = listener.address().port;

  /**
   * Everything a spoofing guest in `a` would send, then one datagram of its
   * own; resolves with the bridge port that learnt `silent` (the MAC of a VM
   * that sends nothing, so nothing learns it back) once that arrived.
   */
  const attack = async (marker: string) => {
    const toNode = { dstMac: bridgeMac(bridge), dst: gw, sport: 40000, dport: port };
    const frames = [
      arpClaim(a.mac, gw, 'request'),
      arpClaim(a.mac, gw, 'reply'),
      arpClaim(a.mac, b.ip, 'request'),
      arpClaim(a.mac, b.ip, 'reply'),
      udp4({ ...toNode, srcMac: a.mac, src: b.ip, payload: Buffer.from('from b’s address') }),
      udp4({ ...toNode, srcMac: b.mac, src: b.ip, payload: Buffer.from('as b') }),
      udp4({ ...toNode, srcMac: silent, src: a.ip, payload: Buffer.from('as a silent VM') }),
      udp4({ srcMac: a.mac, dstMac: b.mac, src: a.ip, dst: b.ip, sport: 67, dport: 68, payload: Buffer.alloc(300) }),
      dhcpDecline({ srcMac: a.mac, chaddr: b.mac, ip: b.ip, server: gw }),
      udp4({
        srcMac: a.mac,
        dstMac: BROADCAST,
        src: '0.0.0.0',
        dst: '255.255.255.255',
        sport: 68,
        dport: 67,
        payload: Buffer.alloc(300),
        firstFragment: true,
      }),
      routerAdvertisement(a.mac, Buffer.from([0x20, 0x01, 0x0d, 0xb8, ...randomBytes(4)])),
      udp4({ ...toNode, srcMac: a.mac, src: a.ip, payload: Buffer.from(marker) }),
    ];
    await a.exec(rawsend, 'eth0', ...frames.map((f) => f.toString('hex')));
    await until(
      `the ${marker} datagram`,
      async () => received,
      (r) => r.some((m) => m.text === marker),
    );
    return fdbPort(bridge, silent);
  };
  const state = async (fdbPortOfSilent: string | undefined) => ({
    bNeighbourGateway: await neighbour(gw, 'eth0', b.exec),
    nodeNeighbourB: await neighbour(b.ip, bridge),
    fdbPortOfSilent,
    spoofed: received.filter((m) => m.text !== 'marker' && m.text !== 'marker again'),
    bIpv6: (await b.exec('ip', '-6', 'addr', 'show', 'dev', 'eth0')).includes('2001:db8:'),
    nodeIpv6: (await run(['ip', '-6', 'route', 'show', 'dev', bridge])).includes('2001:db8:'),
    declined: (await dhcpLog()).includes('DHCPDECLINE'),
  });

  await net.ports.ensure(async () => ports);
  t.equal(await lease(), 'leased', 'b takes its lease through the filter');
  await b.exec('busybox', 'ping', '-c', '1', '-W', '5', gw);
  await run(['busybox', 'ping', '-c', '1', '-W', '5', b.ip]);
  const clean = {
    bNeighbourGateway: bridgeMac(bridge),
    nodeNeighbourB: b.mac,
    fdbPortOfSilent: undefined,
    spoofed: [],
    bIpv6: false,
    nodeIpv6: false,
    declined: false,
  };
  t.same(await state(await fdbPort(bridge, silent)), clean, 'before: b knows the gateway, the node knows b');

  const fdbFiltered = await attack('marker');
  // b has seen every frame before a's ping, which took the same way.
  await a.exec('busybox', 'ping', '-c', '1', '-W', '5', b.ip);
  t.same(
    await state(fdbFiltered),
    clean,
    'with the filter: no ARP table, bridge port, address, route or lease changed; nothing arrived from b’s address or another MAC',
  );
  t.equal(await lease(), 'leased', 'b still takes its lease');
  await a.exec('busybox', 'ping', '-c', '1', '-W', '5', gw);
  t.pass('a’s own traffic flows');
  const counts = await dropCounts(table, a.veth);
  const named = [
    'another MAC',
    'ARP for another address',
    'DHCP server message',
    'DHCP for another MAC',
    'fragmented DHCP',
    'IPv4 from another address',
    'IPv6 router advertisement',
  ];
  t.same(
    named.filter((c) => !(counts[c]! > 0)),
    [],
    `every drop rule of a’s port counted packets: ${JSON.stringify(counts)}`,
  );
  const ofB = await dropCounts(table, b.veth);
  // (Its namespace's own IPv6 chatter is dropped as neither IPv4 nor ARP.)
  t.same(
    named.filter((c) => ofB[c] !== 0),
    [],
    'b’s port dropped nothing of b’s own',
  );

  await net.ports.ensure(async () => ports);
  t.same(await dropCounts(table, a.veth), counts, 'ensuring an unchanged filter leaves it (and its counters) alone');
  await removePortFilter(table);
  await net.ports.ensure(async () => ports);
  t.match(await run(['nft', 'list', 'table', 'bridge', table]), `chain port-${a.veth}`, 'a removed table is rebuilt');
  await run([
    'nft',
    'delete',
    'rule',
    'bridge',
    table,
    `port-${a.veth}`,
    'handle',
    handleOf(await run(['nft', '-a', 'list', 'chain', 'bridge', table, `port-${a.veth}`]), 'ARP for another address'),
  ]);
  await net.ports.ensure(async () => ports);
  t.match(
    await run(['nft', 'list', 'chain', 'bridge', table, `port-${a.veth}`]),
    'ARP for another address',
    'so is one edited behind the agent’s back',
  );

  // The control: the same frames, unfiltered, do what the filter stops (the bridge still refuses router advertisements).
  await net.ports.ensure(async () => []);
  t.notMatch(await run(['nft', 'list', 'table', 'bridge', table]), 'port-', 'ports gone from the records leave the table');
  const fdbAfter = await attack('marker again');
  const poisoned = await until(
    'the unfiltered attack to take effect',
    () => state(fdbAfter),
    (s) => s.declined && s.bIpv6,
  );
  t.same(
    poisoned,
    {
      bNeighbourGateway: a.mac,
      nodeNeighbourB: a.mac,
      fdbPortOfSilent: a.veth,
      spoofed: [
        { from: b.ip, text: 'from b’s address' },
        { from: b.ip, text: 'as b' },
        { from: a.ip, text: 'as a silent VM' },
      ],
      bIpv6: true,
      nodeIpv6: false,
      declined: true,
    },
    'without it: b’s gateway and the node’s b are a’s MAC, the bridge sends another VM’s traffic to a, the node takes b’s address from a, b takes a’s prefix, dnsmasq takes a DECLINE for b',
  );
  t.match(await lease(), /no lease|failed/, 'and b gets no lease any more');
  t.equal(await run(['cat', `/proc/sys/net/ipv6/conf/${bridge}/accept_ra`]), '0\n', 'the bridge itself takes no router advertisements');
});

t.test('on the host: a frame to a MAC no port holds (a VM that moved away) is routed by the node, not flooded', async (t) => {
  // What a guest's neighbour cache holds after a live migration: an address at a MAC that left the bridge.
  const suffix = randomBytes(2).toString('hex');
  const bridge = `vkm${suffix}`;
  const range = parseIpv4Range(`10.${100 + randomInt(100)}.${randomInt(256)}.0/28`, 'test range');
  const gw = gatewayOf(range);
  const dir = await mkdtemp(path.join(tmpdir(), 'vkvm-port-filter-'));
  const net = new NodeNetwork({ bridge, dir, log: pino({ level: 'silent' }) });
  t.teardown(async () => {
    await net.remove();
    await rm(dir, { recursive: true, force: true });
  });
  await net.ensure(range, []);
  const a = await namespace(t, bridge, 'a', '02:00:00:00:00:0a', `${intToIp(range.network + 2)}/28`);
  const b = await namespace(t, bridge, 'b', '02:00:00:00:00:0b', `${intToIp(range.network + 3)}/28`);
  const gone = '02:00:00:00:00:0d';
  await a.exec('ip', 'neigh', 'replace', gw, 'lladdr', gone, 'nud', 'permanent', 'dev', 'eth0');
  await a.exec('ip', 'neigh', 'replace', b.ip, 'lladdr', gone, 'nud', 'permanent', 'dev', 'eth0');
  const ping = (ip: string) =>
    a.exec('busybox', 'ping', '-c', '1', '-W', '2', ip).then(
      () => 'answered',
      () => 'silent',
    );
  await removePortFilter(portFilterTable(bridge));
  t.same(
    { node: await ping(gw), b: await ping(b.ip) },
    { node: 'silent', b: 'silent' },
    'control: without the table such frames reach nobody',
  );
  await net.ports.ensure(async () => [a, b].map(({ veth, mac, ip }) => ({ veth, mac, ip })));
  t.same(
    { node: await ping(gw), b: await ping(b.ip) },
    { node: 'answered', b: 'answered' },
    'with it: the node takes them, answers its own and routes the other to b',
  );
  const listing = await run(['nft', 'list', 'chain', 'bridge', portFilterTable(bridge), 'to-absent-macs']);
  t.match(listing, /counter packets [1-9]/, 'counted');
});

function handleOf(listing: string, comment: string): string {
  const m = new RegExp(`comment "${comment}" # handle (\\d+)`).exec(listing);
  if (!m) throw new Error(`no rule "${comment}" in:\n${listing}`);
  return m[1]!;
}

t.test('on the host: callers arriving while a rebuild waits share it, and the table ends as the last one asked', async (t) => {
  const filter = new PortFilter(`vkc${randomBytes(2).toString('hex')}`, '02:00:00:00:00:fe', pino({ level: 'silent' }));
  t.teardown(() => removePortFilter(filter.table));
  const port = (i: number): VmPort => ({
    veth: `vhc${String(i).padStart(11, '0')}`,
    mac: `02:00:00:00:00:${String(i).padStart(2, '0')}`,
    ip: `10.9.0.${i}`,
  });
  const loaded: number[] = [];
  let release!: () => void;
  const firstLoading = new Promise<void>((resolve) => {
    release = resolve;
  });
  let firstStarted!: () => void;
  const started = new Promise<void>((resolve) => (firstStarted = resolve));
  // Ten VMs attached one after another, each asking for the filter with the ports recorded so far;
  // the first one's rebuild is under way while the other nine ask.
  const first = filter.ensure(async () => {
    loaded.push(1);
    firstStarted();
    await firstLoading;
    return [port(1)];
  });
  await started;
  const rest = Array.from({ length: 9 }, (_, i) =>
    filter.ensure(async () => {
      loaded.push(i + 2);
      return Array.from({ length: i + 2 }, (_, j) => port(j + 1));
    }),
  );
  release();
  await Promise.all([first, ...rest]);
  const chains = [...(await run(['nft', 'list', 'table', 'bridge', filter.table])).matchAll(/chain (port-\S+) \{/g)].map((m) => m[1]);
  t.same(
    { loaded, chains },
    { loaded: [1, 10], chains: Array.from({ length: 10 }, (_, j) => `port-${port(j + 1).veth}`) },
    'two rebuilds for ten callers: the first, and one shared by the nine that came while it ran, with the last list',
  );
});

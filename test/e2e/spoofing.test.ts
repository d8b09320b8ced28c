// Anti-spoofing on the node bridge, on the real control plane and real
// guests: two bridged VMs A and B; A, root in its guest as any tenant is,
// runs a rogue DHCP server while B asks for a lease, then claims the
// gateway's and B's addresses by ARP, sends as B and as a MAC not its own,
// declines B's address to dnsmasq and advertises an IPv6 prefix. None of it reaches B, the
// node or dnsmasq as valid; A's own traffic flows. A tenant in another
// namespace cannot take A's MAC (or the gateway's) for a bridged VMI: the node
// refuses it naming the field, and nothing of it is made. The port filter goes
// with its VM, comes back after the repair, and goes with the node network.
import { createSocket } from 'node:dgram';
import { randomBytes, randomInt } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import { run } from '../../provider/network/host.js';
import { gatewayOf, parseIpv4Range } from '../../provider/network/ipv4.js';
import { bridgeMac } from '../../provider/network/node-network.js';
import { portFilterTable } from '../../provider/network/port-filter.js';
import { vmNetworkNames } from '../../provider/network/vm-network.js';
import { arpClaim, dhcpDecline, routerAdvertisement, udp4 } from '../helpers/frames.js';
import { hostFootprint, leftSince, type AuditedAgent } from '../helpers/leftovers.js';
import { buildRawsend } from '../helpers/rawsend.js';
import {
  condition,
  createTenant,
  poll,
  removeNetworkOf,
  smokeVmiSpec,
  startAgent,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  vmiOf,
  waitFor,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-spoof';
const NS = 'e2e-spoof';
const TENANT_NS = 'e2e-spoof-tenant';
const BOOT_DEADLINE_MS = 240_000;
/** A MAC no VM on the bridge has: the bridge must never learn it from A's port. */
const SILENT_MAC = '02:00:00:00:00:5c';

const vmPod = (name: string) => testGuestPod({ name, node: NODE, terminationGracePeriodSeconds: 1 });

/** The guest's page names the address its DHCP client configured. */
function guestPage(ip: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = request({ host: ip, port: 80, path: '/', timeout: 3000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve(body));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(undefined));
    req.end();
  });
}

/** Packets of a port's drop rules, by comment. */
async function dropCounts(table: string, veth: string): Promise<Record<string, number>> {
  const out = JSON.parse(await run(['nft', '-j', 'list', 'chain', 'bridge', table, `port-${veth}`])) as {
    nftables: Array<{ rule?: { comment?: string; expr: Array<{ counter?: { packets: number } }> } }>;
  };
  return Object.fromEntries(
    out.nftables.flatMap((o) => (o.rule?.comment ? [[o.rule.comment, o.rule.expr.find((e) => e.counter)?.counter?.packets ?? 0]] : [])),
  );
}

const portChains = async (table: string) =>
  [...(await run(['nft', 'list', 'table', 'bridge', table]).catch(() => '')).matchAll(/chain port-(\S+) \{/g)].map((m) => m[1]!).sort();

t.test('a spoofing guest reaches neither its neighbour, the node nor dnsmasq', async (t) => {
  const cluster = await startTestCluster(t);
  const podCidr = `10.${100 + randomInt(150)}.${randomInt(256)}.0/28`;
  const agent = await startAgent(t, cluster, { nodeName: NODE, extraArgs: [`--pod-cidr=${podCidr}`] });
  const range = parseIpv4Range(podCidr, 'podCIDR');
  const gw = gatewayOf(range);
  const table = portFilterTable(agent.bridge);
  const dhcpLog = () => readFile(join(agent.stateDir, 'network', 'dnsmasq.log'), 'utf8').catch(() => '');
  const kubectlExec = (pod: string, ...argv: string[]) => cluster.kubectl(['-n', NS, 'exec', pod, '--', ...argv], { timeoutMs: 60_000 });
  /** Runs a command in a guest; its stdout, or a failure naming the command. */
  const exec = async (pod: string, ...argv: string[]) => {
    const r = await kubectlExec(pod, ...argv);
    if (r.code !== 0) throw new Error(`${pod}: ${argv.join(' ')} exited ${r.code}: ${r.stderr}`);
    return r.stdout;
  };
  const ns = await testNamespace(t, cluster, NS);
  for (const name of ['a', 'b']) await ns.createPod(vmPod(name));
  const vm = async (name: string) => {
    const pod = await waitFor(ns.pod(name), (p) => condition(p, 'Ready') === 'True' && !!p.status?.podIP, {
      what: 'Ready with an IP',
      deadlineMs: BOOT_DEADLINE_MS,
    });
    const ip = pod.status!.podIP!;
    await poll(
      `guest ${name} answers on ${ip}`,
      () => guestPage(ip),
      (b) => b === `vkvm-guest ${ip}\n`,
      { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 1000 },
    );
    await poll(
      `guest agent of ${name}`,
      () => kubectlExec(name, '/bin/true'),
      (r) => r.code === 0,
      { deadlineMs: 90_000, intervalMs: 2000 },
    );
    const mac = (await exec(name, '/bin/cat', '/sys/class/net/eth0/address')).trim();
    return { name, ip, mac, veth: vmNetworkNames(pod.metadata!.uid!).hostVeth };
  };
  const a = await vm('a');
  const b = await vm('b');
  /**
   * B drops its address and restarts its DHCP client (init respawns it),
   * which asks anew by broadcast; resolves with B's address and default route
   * once configured again. Dropped first: until the new client is bound, B
   * shows none.
   */
  const askAgain = async (t: Test) => {
    await exec('b', '/bin/sh', '-c', 'ip addr flush dev eth0 && killall udhcpc');
    const leased = await poll(
      'B configured again',
      () => exec('b', '/bin/sh', '-c', 'ip -4 addr show dev eth0; ip route show default'),
      (out) => /inet \S+/.test(out) && out.includes('default'),
      { deadlineMs: 90_000, intervalMs: 1000 },
    );
    t.comment(`B after asking again: ${leased.replace(/\s+/g, ' ')}`);
    return leased;
  };

  await t.test('each VM port has its chain; the bridge takes no router advertisements', async (t) => {
    t.same(await portChains(table), [a.veth, b.veth].sort(), `table bridge ${table}: a chain per VM port`);
    const chainA = await run(['nft', 'list', 'chain', 'bridge', table, `port-${a.veth}`]);
    t.match(chainA, `ether saddr != ${a.mac} counter`, 'A’s port lets out only its MAC');
    t.match(chainA, `ip saddr ${a.ip} accept`, 'and its pod IP');
    for (const key of ['accept_ra', 'autoconf'])
      t.equal(await readFile(`/proc/sys/net/ipv6/conf/${agent.bridge}/${key}`, 'utf8'), '0\n', `${agent.bridge}: ${key} 0`);
  });

  await t.test('a rogue DHCP server in A: B, asking again, takes its lease from dnsmasq', async (t) => {
    const conf = [
      'interface eth0',
      'start 192.0.2.10',
      'end 192.0.2.20',
      `static_lease ${b.mac} 192.0.2.77`,
      `opt router ${a.ip}`,
      'opt subnet 255.255.255.0',
      'lease_file /tmp/udhcpd.leases',
      'pidfile /tmp/udhcpd.pid',
    ];
    await exec(
      'a',
      '/bin/sh',
      '-c',
      `printf '%s\\n' "$@" >/tmp/udhcpd.conf && touch /tmp/udhcpd.leases && udhcpd /tmp/udhcpd.conf </dev/null >/dev/null 2>&1`,
      'sh',
      ...conf,
    );
    t.teardown(() => kubectlExec('a', '/bin/killall', 'udhcpd'));
    const leased = await askAgain(t);
    t.match(leased, `inet ${b.ip}/${range.prefixLength}`, 'B holds its pod IP');
    t.match(leased, `default via ${gw} `, 'behind the node’s gateway');
    const dhcpDrops = async () => (await dropCounts(table, a.veth))['DHCP server message'] ?? 0;
    const offered = await poll('A’s offers dropped', dhcpDrops, (n) => n > 0, { deadlineMs: 30_000 }).catch(dhcpDrops);
    t.ok(offered > 0, `A’s server answered and its answers were dropped (${offered} packets)`);
  });

  await t.test('ARP, source addresses, a DHCP DECLINE and a router advertisement from A are dropped at its port', async (t) => {
    const rawsend = await readFile(await buildRawsend(t));
    await exec('a', '/bin/sh', '-c', 'echo "$0" | base64 -d >/tmp/rawsend && chmod +x /tmp/rawsend', rawsend.toString('base64'));
    // B and the node know each other (ARP entries the attack would overwrite).
    await exec('b', '/bin/ping', '-c', '1', '-W', '5', gw);
    await guestPage(b.ip);
    const listener = createSocket('udp4');
    const received: Array<{ from: string; text: string }> = [];
    listener.on('message', (msg, rinfo) => received.push({ from: rinfo.address, text: msg.toString() }));
    await new Promise<void>((resolve) => listener.bind(0, gw, resolve));
    t.teardown(() => listener.close());
    const toNode = { dstMac: bridgeMac(agent.bridge), dst: gw, sport: 40000, dport: listener.address().port };

    const state = async () => ({
      bNeighbourOfGateway: /lladdr (\S+)/.exec(await exec('b', '/bin/ip', 'neigh', 'show', gw, 'dev', 'eth0'))?.[1],
      nodeNeighbourOfB: (JSON.parse(await run(['ip', '-j', 'neigh', 'show', b.ip, 'dev', agent.bridge])) as Array<{ lladdr?: string }>)[0]
        ?.lladdr,
      bridgeLearntSilentMac: (await run(['bridge', 'fdb', 'show', 'br', agent.bridge])).includes(SILENT_MAC),
      bAddresses: (await exec('b', '/bin/ip', 'addr', 'show', 'dev', 'eth0'))
        .match(/inet6? \S+/g)
        ?.filter((x) => !x.startsWith('inet6 fe80:')),
      bRoutes: (await exec('b', '/bin/sh', '-c', 'ip route; ip -6 route'))
        .split('\n')
        .filter((l) => l && !l.startsWith('fe80::') && !l.includes('ff00::/8')),
      nodeRoutes: await run(['sh', '-c', `ip route show dev ${agent.bridge}; ip -6 route show dev ${agent.bridge}`]),
      nodeIpv6: (await run(['ip', '-6', 'addr', 'show', 'dev', agent.bridge])).match(/inet6 \S+/g),
      declines: (await dhcpLog()).match(/DHCPDECLINE.*/g) ?? [],
      fromNotA: received.filter((m) => m.from !== a.ip || m.text !== 'marker'),
    });
    const before = await state();
    t.equal(before.bNeighbourOfGateway, bridgeMac(agent.bridge), `B reaches the gateway at the bridge’s MAC`);
    t.equal(before.nodeNeighbourOfB, b.mac, 'the node reaches B at B’s MAC');
    t.comment(`before the attack: ${JSON.stringify(before)}`);

    const frames = [
      arpClaim(a.mac, gw, 'request'),
      arpClaim(a.mac, gw, 'reply'),
      arpClaim(a.mac, b.ip, 'request'),
      arpClaim(a.mac, b.ip, 'reply'),
      udp4({ ...toNode, srcMac: a.mac, src: b.ip, payload: Buffer.from('from B’s address') }),
      udp4({ ...toNode, srcMac: b.mac, src: b.ip, payload: Buffer.from('as B') }),
      udp4({ ...toNode, srcMac: SILENT_MAC, src: a.ip, payload: Buffer.from('from a MAC not A’s') }),
      dhcpDecline({ srcMac: a.mac, chaddr: b.mac, ip: b.ip, server: gw }),
      routerAdvertisement(a.mac, Buffer.from([0x20, 0x01, 0x0d, 0xb8, ...randomBytes(4)])),
      udp4({ ...toNode, srcMac: a.mac, src: a.ip, payload: Buffer.from('marker') }),
    ];
    await exec('a', '/tmp/rawsend', 'eth0', ...frames.map((f) => f.toString('hex')));
    // The marker went last the same way: once it is in, everything before it has been through.
    await poll(
      'A’s own datagram',
      async () => received,
      (r) => r.some((m) => m.text === 'marker' && m.from === a.ip),
      { deadlineMs: 30_000, intervalMs: 200 },
    );
    // And B has seen what A broadcast before A's ping, which took the same way.
    await exec('a', '/bin/ping', '-c', '1', '-W', '5', b.ip);
    const after = await state();
    t.comment(`after the attack: ${JSON.stringify(after)}`);
    t.same(
      after,
      before,
      'B’s ARP entry for the gateway, the node’s for B, the bridge’s MAC table, B’s addresses and routes, the node’s routes and addresses on the bridge, dnsmasq: all unchanged; nothing reached the node but A’s own datagram',
    );

    t.match(await askAgain(t), `inet ${b.ip}/${range.prefixLength}`, 'B, asking dnsmasq again, is given its address');

    const counts = await dropCounts(table, a.veth);
    const expected = [
      'another MAC',
      'ARP for another address',
      'DHCP for another MAC',
      'IPv4 from another address',
      'IPv6 router advertisement',
    ];
    t.same(
      expected.filter((c) => !(counts[c]! > 0)),
      [],
      `A’s port counted drops: ${JSON.stringify(counts)}`,
    );
    t.match(await kubectlExec('a', '/bin/ping', '-c', '1', '-W', '5', gw), { code: 0 }, 'A still reaches the gateway');
    t.match(await kubectlExec('a', '/bin/wget', '-q', '-O', '-', `http://${b.ip}/`), { code: 0, stdout: `vkvm-guest ${b.ip}\n` }, 'and B');
  });

  await t.test('a tenant’s bridged VMI with A’s MAC or the gateway’s is refused naming the field; nothing of it is made', async (t) => {
    await installClusterManifests(cluster.kubeconfigPath);
    const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
    t.teardown(() => controllers.stop());
    const tenantNs = await testNamespace(t, cluster, TENANT_NS);
    const tenant = await createTenant(cluster.clients, TENANT_NS);
    const audited: AuditedAgent = { stateDir: agent.stateDir, runDir: join(agent.stateDir, 'run'), bridge: agent.bridge };
    const before = await hostFootprint(audited);
    const fdb = () => run(['bridge', 'fdb', 'show', 'br', agent.bridge]).then((out) => out.split('\n').filter((l) => l.includes(a.mac)));
    const fdbBefore = await fdb();
    // Another spelling of the same address (upper case, hyphens) is the same MAC.
    const attempts = [
      { name: 'thief', mac: a.mac.toUpperCase().replace(/:/g, '-'), holder: 'another VM on this node', normalized: a.mac },
      { name: 'gateway', mac: bridgeMac(agent.bridge), holder: 'the node bridge', normalized: bridgeMac(agent.bridge) },
    ];
    for (const { name, mac } of attempts) {
      const spec = smokeVmiSpec();
      spec.domain.devices!.interfaces = [{ name: 'default', bridge: {}, macAddress: mac }];
      await tenant.custom.createNamespacedCustomObject({
        group: 'kubevirt.io',
        version: 'v1',
        namespace: TENANT_NS,
        plural: 'virtualmachineinstances',
        body: vmiOf(name, spec),
      });
    }
    for (const { name, holder, normalized } of attempts) {
      const failed = await waitFor(tenantNs.vmi(name), (v) => v.status?.phase === 'Failed', { what: 'Failed', deadlineMs: 120_000 });
      t.match(
        { reason: failed.status?.reason, synchronized: failed.status?.conditions?.find((c) => c.type === 'Synchronized') },
        {
          reason: 'InvalidVMSpec',
          synchronized: {
            status: 'False',
            message: new RegExp(
              `spec\\.domain\\.devices\\.interfaces\\[0\\]\\.macAddress: MAC address ${normalized} is in use by ${holder}`,
            ),
          },
        },
        `${name}: Failed, InvalidVMSpec, naming spec.domain.devices.interfaces[0].macAddress`,
      );
    }
    t.same(
      leftSince(before, await hostFootprint(audited)),
      [],
      'no veth, namespace, tap, nft chain, lease, DHCP entry, process or file of theirs on the node',
    );
    t.same(await fdb(), fdbBefore, 'the bridge still knows A’s MAC on A’s port alone');
    t.match(await kubectlExec('a', '/bin/ping', '-c', '1', '-W', '5', gw), { code: 0 }, 'A still reaches the gateway');
    for (const { name } of attempts)
      await tenant.custom.deleteNamespacedCustomObject({
        group: 'kubevirt.io',
        version: 'v1',
        namespace: TENANT_NS,
        plural: 'virtualmachineinstances',
        name,
      });
    await waitForGone(tenantNs.pods({}), { deadlineMs: 120_000 });
  });

  await t.test('the filter goes with its VM, comes back after the repair, and goes with the node network', async (t) => {
    await run(['nft', 'delete', 'table', 'bridge', table]);
    const rebuilt = await poll(
      'the repair to rebuild the table',
      () => portChains(table),
      (c) => c.length === 2,
      { deadlineMs: 90_000, intervalMs: 1000 },
    ).catch(() => portChains(table));
    t.same(rebuilt, [a.veth, b.veth].sort(), 'the 30 s repair rebuilt both ports’ chains');
    await cluster.clients.core.deleteNamespacedPod({ name: 'b', namespace: NS });
    await waitForGone(ns.pod('b'), { deadlineMs: 120_000 });
    t.same(await portChains(table), [a.veth], 'B’s chain went with B; A’s stays');
    await cluster.clients.core.deleteNamespacedPod({ name: 'a', namespace: NS });
    await waitForGone(ns.pod('a'), { deadlineMs: 120_000 });
    t.same(await portChains(table), [], 'and A’s with A');
    await agent.kill();
    await removeNetworkOf(agent.stateDir, agent.bridge);
    t.equal(
      await run(['nft', 'list', 'table', 'bridge', table]).catch(() => 'absent'),
      'absent',
      'removing the node network (vkvm reset, vkvm up’s stop) removes the table',
    );
  });
});

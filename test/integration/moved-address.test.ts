// A VM keeps its pod address when it migrates (docs/design/live-migration.md
// §6), on real kernels but without QEMU: three simulated nodes (network
// namespaces on one segment, as `vkvm up --nodes N` builds them), each with
// its own PodNetwork in its own process. A "guest" namespace stands in for
// the VM behind its tap on node A; a TCP connection from a pod address of
// node C is held open while the guest's interface moves to its port on node
// B (attachIncoming on B, the move, claimMovedAddress on B, self-announce,
// handOverAddress on A). The same connection still echoes, first through A
// (C has not heard yet), then straight to B once C routes the /32 by B's
// claim and A's lending; a hostile C's claims (of that address, and of one A
// lent to nobody) and lending of A's address move no route; B serves the
// address by DHCP with its home gateway; detach leaves nothing behind. A masquerade VM the same way: B's namespace holds
// the pod address, the guest's gateway keeps its MAC, and B's NAT picks the
// connection up mid-stream. Needs root; touches only namespaces it makes
// (the segment too), so a fresh view is enough:
//   bash test/fresh-host/fresh-view.sh npx tap test/integration/moved-address.test.ts
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { run } from '../../provider/network/host.js';
import { masqueradeGatewayMac, vmNetworkNames } from '../../provider/network/vm-network.js';
import { selfAnnounce } from '../helpers/frames.js';
import { buildRawsend } from '../helpers/rawsend.js';
import {
  echoSession,
  fdbPortOf,
  GUEST_MAC,
  netnsExec,
  portChains,
  publishedBy,
  slash32s,
  threeNodes,
  vmSpec,
  withdrawnBy,
  type SimNode,
} from '../helpers/sim-nodes.js';

t.test('a VM’s address moves with it between nodes; a TCP connection held open keeps echoing', async (t) => {
  const { r, net, guest, a, b, c, tellPeers } = await threeNodes(t);
  // The VM on A, and the guest behind its port: a namespace whose eth0 (the guest MAC) joins the VM namespace's bridge.
  const uidA = `mig-a-${r}`;
  const uidB = `mig-b-${r}`;
  const onA = await a.call<{ attachment: { podIP: string } }>('attach', vmSpec(uidA));
  const podIP = onA.attachment.podIP;
  t.match(podIP, new RegExp(`^${net.replace('.', '\\.')}\\.0\\.`), 'the VM holds an address of A’s range');
  const vmNsA = vmNetworkNames(uidA).netns;
  const vmNsB = vmNetworkNames(uidB).netns;
  await a.inMounts('ip', '-n', guest, 'link', 'add', 'eth0', 'address', GUEST_MAC, 'type', 'veth', 'peer', 'name', 'qemu0', 'netns', vmNsA);
  await a.inMounts('ip', '-n', vmNsA, 'link', 'set', 'qemu0', 'master', 'k6t-eth0', 'up');
  for (const cmd of [
    ['link', 'set', 'lo', 'up'],
    ['addr', 'add', `${podIP}/24`, 'dev', 'eth0'],
    ['link', 'set', 'eth0', 'up'],
    ['route', 'add', 'default', 'via', `${net}.0.1`],
  ])
    await run(['ip', '-n', guest, ...cmd]);

  const { server, client } = await echoSession(t, { guest, c, podIP, net });
  client.send('before');
  await client.waitFor('echo before', 10_000);

  // A migration to C that fails after C prepared: C's detach leaves nothing, and A's lease stays.
  const uidC = `mig-c-${r}`;
  await c.call('attachIncoming', vmSpec(uidC), { podIP, homeCidr: a.podCidr });
  await c.call('detach', uidC);
  const failed = {
    cNetns: (await c.inMounts('ip', 'netns', 'list')).includes(uidC),
    cPortChains: await portChains(c.ns),
    cHosted: await readFile(c.hostedFile, 'utf8'),
    routeOnC: await c.routeTo(podIP),
  };
  t.same(failed, { cNetns: false, cPortChains: [], cHosted: '{}', routeOnC: `via ${a.address}` }, 'a failed incoming leaves nothing');

  // The move. B prepares the port for the address A lent; nothing routes it to B yet.
  const incoming = await b.call<{ attachment: { podIP: string } }>('attachIncoming', vmSpec(uidB), { podIP, homeCidr: a.podCidr });
  const prepared = { podIP: incoming.attachment.podIP, routeOnB: await b.routeTo(podIP) };
  // The guest's interface goes over to the VM's port on B (what the migration does to the guest), then B claims.
  await a.inMounts('ip', '-n', vmNsA, 'link', 'set', 'qemu0', 'netns', b.vmNetns(uidB));
  await b.inMounts('ip', '-n', vmNsB, 'link', 'set', 'qemu0', 'master', 'k6t-eth0', 'up');
  await b.call('claimMovedAddress', uidB);
  const rawsend = await buildRawsend(t);
  await run(['ip', 'netns', 'exec', guest, rawsend, 'eth0', selfAnnounce(GUEST_MAC).toString('hex')]);
  await a.call('handOverAddress', uidA, { node: 'b', address: b.address });
  client.send('after');
  await client.waitFor('echo after', 20_000);
  const moved = {
    prepared,
    routeOnA: await a.routeTo(podIP),
    routeOnB: await b.routeTo(podIP),
    routeOnC: await c.routeTo(podIP),
    guestMacOnBPort: await fdbPortOf(b.ns, GUEST_MAC),
  };

  // B claimed the address and A lent it to B; C (told, as its Node informer would be) routes it straight to B.
  const hosted = await publishedBy(b, podIP);
  const lent = await publishedBy(a, podIP, 'lent');
  await tellPeers();
  // The periodic sweep: A's handed-over record gives way to B's annotation.
  await a.call('retainOnly', []);
  client.send('direct');
  await client.waitFor('echo direct', 20_000);
  // A hostile C claims the moved address (later than B did) and an address of A's range A lent to nobody, and lends
  // A's address to itself: A and B route nothing to C, and the connection goes on echoing.
  const unlent = `${net}.0.77`;
  const now = new Date().toISOString();
  await tellPeers({ c: { hosted: { [podIP]: now, [unlent]: now }, lent: { [podIP]: 'c' } } });
  client.send('hostile');
  await client.waitFor('echo hostile', 20_000);
  const hostile = {
    movedOnA: await a.routeTo(podIP),
    unlentOnA: await a.routeTo(unlent),
    unlentOnB: await b.routeTo(unlent),
    slash32sOnA: await slash32s(a.ns),
    slash32sOnB: await slash32s(b.ns),
  };
  await tellPeers();
  // The guest renews its lease on B: B's DHCP serves its address with its home gateway.
  const script = join(await mkdtemp(join(tmpdir(), 'vkvm-udhcpc-')), 'report');
  t.teardown(() => rm(join(script, '..'), { recursive: true, force: true }));
  await writeFile(script, '#!/bin/sh\n[ "$1" = bound ] && echo "bound $ip router $router"\nexit 0\n', { mode: 0o755 });
  const dhcp = await netnsExec(guest, 'busybox', 'udhcpc', '-i', 'eth0', '-q', '-n', '-t', '5', '-T', '1', '-s', script).catch(
    (e: Error) => e.message,
  );
  const aLeases = JSON.parse(await readFile(join(a.peersFile, '..', 'network', 'leases.json'), 'utf8')) as {
    leases?: Record<string, string>;
    lent?: Record<string, { node: string }>;
  };
  t.same(
    {
      ...moved,
      routeOnCAfter: await c.routeTo(podIP),
      hostedByB: Object.keys(hosted),
      lentByA: lent,
      hostile,
      aLease: aLeases.leases?.[uidA],
      aLentTo: aLeases.lent?.[uidA]?.node,
      aPortChains: await portChains(a.ns),
      dhcp:
        dhcp.split('\n').find((l) => l.startsWith('bound')) ??
        `${dhcp}\n${await readFile(join(b.peersFile, '..', 'network', 'dnsmasq.log'), 'utf8').catch(() => '')}\n${await readFile(join(b.peersFile, '..', 'network', 'dnsmasq.conf'), 'utf8').catch(() => '')}`,
      connections: server.lines.filter((l) => l.startsWith('connection')),
      closed: client.lines.includes('closed'),
    },
    {
      prepared: { podIP, routeOnB: `via ${a.address}` },
      routeOnA: `via ${b.address}`,
      routeOnB: 'dev vkvm0',
      routeOnC: `via ${a.address}`,
      guestMacOnBPort: vmNetworkNames(uidB).hostVeth,
      routeOnCAfter: `via ${b.address}`,
      hostedByB: [podIP],
      lentByA: { [podIP]: 'b' },
      hostile: {
        movedOnA: `via ${b.address}`,
        unlentOnA: 'dev vkvm0',
        unlentOnB: `via ${a.address}`,
        slash32sOnA: [podIP],
        slash32sOnB: [podIP],
      },
      aLease: podIP,
      aLentTo: 'b',
      aPortChains: [],
      dhcp: `bound ${podIP} router ${net}.0.1`,
      connections: ['connection 1'],
      closed: false,
    },
    'the address is the same; B routes it to the VM, A via B, C via A until told, then via B; a hostile claim moves nothing; one connection throughout',
  );

  // Deleted on B: its /32, annotation and namespace go; A's lease stays lent (released after the grace period).
  await a.call('detach', uidA);
  await b.call('detach', uidB);
  await tellPeers();
  await a.call('retainOnly', []);
  const aAfter = JSON.parse(await readFile(join(a.peersFile, '..', 'network', 'leases.json'), 'utf8')) as {
    lent?: Record<string, unknown>;
  };
  t.same(
    {
      aStillLent: Object.keys(aAfter.lent ?? {}),
      hostedByB: JSON.parse(await readFile(b.hostedFile, 'utf8')) as unknown,
      routes: await Promise.all([a, b, c].map((n) => slash32s(n.ns))),
      vmNetns: [...(await a.inMounts('ip', 'netns', 'list')).split('\n'), ...(await b.inMounts('ip', 'netns', 'list')).split('\n')].filter(
        (l) => l.includes(uidA) || l.includes(uidB),
      ),
      bPortChains: await portChains(b.ns),
    },
    { aStillLent: [uidA], hostedByB: {}, routes: [[], [], []], vmNetns: [], bPortChains: [] },
    'after detach: no /32 anywhere, nothing published, no VM namespace or port chain; the lease stays lent for the grace period',
  );
});

t.test('a masquerade VM keeps its pod address too: the target namespace holds it, the NAT picks the connection up', async (t) => {
  const { r, net, guest, a, b, c, tellPeers } = await threeNodes(t);
  const uidA = `masq-a-${r}`;
  const uidB = `masq-b-${r}`;
  const podIP = (await a.call<{ attachment: { podIP: string } }>('attach', vmSpec(uidA, 'masquerade'))).attachment.podIP;
  const vmNsA = vmNetworkNames(uidA).netns;
  const vmNsB = vmNetworkNames(uidB).netns;
  // The guest behind the namespace's gateway: its tap gives way to a veth with the tap's MAC and address.
  const gatewayMac = masqueradeGatewayMac(GUEST_MAC);
  const tapMacs = [(await a.inMounts('ip', '-n', vmNsA, '-j', 'link', 'show', 'tap0')).includes(gatewayMac)];
  await a.inMounts('ip', '-n', vmNsA, 'link', 'del', 'tap0');
  await a.inMounts('ip', '-n', guest, 'link', 'add', 'eth0', 'address', GUEST_MAC, 'type', 'veth', 'peer', 'name', 'tap0', 'netns', vmNsA);
  const gatewayUp = (n: SimNode, ns: string) =>
    n.inMounts(
      'sh',
      '-c',
      `ip -n ${ns} link set tap0 address ${gatewayMac} && ip -n ${ns} addr add 10.0.2.1/24 dev tap0 && ip -n ${ns} link set tap0 up`,
    );
  await gatewayUp(a, vmNsA);
  for (const cmd of [
    ['link', 'set', 'lo', 'up'],
    ['addr', 'add', '10.0.2.2/24', 'dev', 'eth0'],
    ['link', 'set', 'eth0', 'up'],
    ['route', 'add', 'default', 'via', '10.0.2.1'],
  ])
    await run(['ip', '-n', guest, ...cmd]);
  const { server, client } = await echoSession(t, { guest, c, podIP, net });
  client.send('before');
  await client.waitFor('echo before', 10_000);

  const incoming = await b.call<{ attachment: { podIP: string } }>('attachIncoming', vmSpec(uidB, 'masquerade'), {
    podIP,
    homeCidr: a.podCidr,
  });
  tapMacs.push((await b.inMounts('ip', '-n', vmNsB, '-j', 'link', 'show', 'tap0')).includes(gatewayMac));
  // QEMU on B opens B's tap: here the guest's link takes its place.
  await b.inMounts('ip', '-n', vmNsB, 'link', 'del', 'tap0');
  await a.inMounts('ip', '-n', vmNsA, 'link', 'set', 'tap0', 'netns', b.vmNetns(uidB));
  await gatewayUp(b, vmNsB);
  await b.call('claimMovedAddress', uidB);
  await a.call('handOverAddress', uidA, { node: 'b', address: b.address });
  await publishedBy(b, podIP);
  await publishedBy(a, podIP, 'lent');
  await tellPeers();
  client.send('after');
  await client.waitFor('echo after', 20_000);
  t.same(
    {
      podIP: incoming.attachment.podIP,
      tapMacs,
      bEth0: (await b.inMounts('ip', '-n', vmNsB, '-j', '-4', 'addr', 'show', 'dev', 'eth0')).includes(`"local":"${podIP}"`),
      routeOnB: await b.routeTo(podIP),
      routeOnC: await c.routeTo(podIP),
      connections: server.lines.filter((l) => l.startsWith('connection')),
      closed: client.lines.includes('closed'),
    },
    {
      podIP,
      tapMacs: [true, true],
      bEth0: true,
      routeOnB: 'dev vkvm0',
      routeOnC: `via ${b.address}`,
      connections: ['connection 1'],
      closed: false,
    },
    'the same pod address on B’s namespace, the same gateway MAC for the guest, one connection throughout',
  );
  await a.call('detach', uidA);
  await b.call('detach', uidB);
});

t.test('there and back: the hint is the source’s range, the lease comes home an ordinary one', async (t) => {
  const { r, net, guest, a, b, c, tellPeers } = await threeNodes(t);
  const [uidA, uidB, uidHome] = [`out-a-${r}`, `out-b-${r}`, `home-a-${r}`];
  const podIP = (await a.call<{ attachment: { podIP: string } }>('attach', vmSpec(uidA))).attachment.podIP;
  const ns = (uid: string) => vmNetworkNames(uid).netns;
  await a.inMounts(
    'ip',
    '-n',
    guest,
    'link',
    'add',
    'eth0',
    'address',
    GUEST_MAC,
    'type',
    'veth',
    'peer',
    'name',
    'qemu0',
    'netns',
    ns(uidA),
  );
  await a.inMounts('ip', '-n', ns(uidA), 'link', 'set', 'qemu0', 'master', 'k6t-eth0', 'up');
  for (const cmd of [
    ['link', 'set', 'lo', 'up'],
    ['addr', 'add', `${podIP}/24`, 'dev', 'eth0'],
    ['link', 'set', 'eth0', 'up'],
    ['route', 'add', 'default', 'via', `${net}.0.1`],
  ])
    await run(['ip', '-n', guest, ...cmd]);
  const { client } = await echoSession(t, { guest, c, podIP, net });
  /** The migration's network part, from `from` to `to`, with `homeCidr` as the target agent gives it (the source's range). */
  const move = async (from: SimNode, fromUid: string, to: SimNode, toUid: string) => {
    await to.call('attachIncoming', vmSpec(toUid), { podIP, homeCidr: from.podCidr });
    await from.inMounts('ip', '-n', ns(fromUid), 'link', 'set', 'qemu0', 'netns', to.vmNetns(toUid));
    await to.inMounts('ip', '-n', ns(toUid), 'link', 'set', 'qemu0', 'master', 'k6t-eth0', 'up');
    await to.call('claimMovedAddress', toUid);
    await from.call('handOverAddress', fromUid, { node: to.name, address: to.address });
  };
  await move(a, uidA, b, uidB);
  await publishedBy(b, podIP);
  await publishedBy(a, podIP, 'lent');
  await tellPeers();
  client.send('there');
  await client.waitFor('echo there', 20_000);
  await move(b, uidB, a, uidHome);
  // B no longer claims it, A (home again) no longer lends it.
  await withdrawnBy(b, podIP);
  await withdrawnBy(a, podIP, 'lent');
  await tellPeers();
  await a.call('retainOnly', [uidA, uidHome]);
  client.send('back');
  await client.waitFor('echo back', 20_000);
  const leases = JSON.parse(await readFile(join(a.peersFile, '..', 'network', 'leases.json'), 'utf8')) as {
    leases: Record<string, string>;
    lent?: Record<string, unknown>;
  };
  t.same(
    {
      leases: leases.leases,
      lent: leases.lent ?? {},
      routes: await Promise.all([a, b, c].map(async (n) => n.routeTo(podIP))),
      closed: client.lines.includes('closed'),
    },
    {
      leases: { [uidHome]: podIP },
      lent: {},
      routes: ['dev vkvm0', `via ${a.address}`, `via ${a.address}`],
      closed: false,
    },
    'back home: an ordinary lease of the VM, routed on the bridge here and via A everywhere else, the connection held',
  );
  for (const [n, uid] of [
    [a, uidA],
    [b, uidB],
    [a, uidHome],
  ] as const)
    await n.call('detach', uid);
  // B's sweep: its route via A is A's range's route anyway.
  await b.call('retainOnly', []);
  t.same(await Promise.all([a, b, c].map((n) => slash32s(n.ns))), [[], [], []], 'no /32 left anywhere');
});

// A VM keeps its pod address when it migrates (docs/design/live-migration.md
// §6), on real kernels but without QEMU: three simulated nodes (network
// namespaces on one segment, as `vkvm up --nodes N` builds them), each with
// its own PodNetwork in its own process. A "guest" namespace stands in for
// the VM behind its tap on node A; a TCP connection from a pod address of
// node C is held open while the guest's interface moves to its port on node
// B (attachIncoming on B, the move, claimMovedAddress on B, self-announce,
// handOverAddress on A). The same connection still echoes, first through A
// (C has not heard yet), then straight to B once C routes the /32 from B's
// annotation; B serves the address by DHCP with its home gateway; detach
// leaves nothing behind. A masquerade VM the same way: B's namespace holds
// the pod address, the guest's gateway keeps its MAC, and B's NAT picks the
// connection up mid-stream. Needs root; touches only namespaces it makes
// (the segment too), so a fresh view is enough:
//   bash test/fresh-host/fresh-view.sh npx tap test/integration/moved-address.test.ts
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t, { type Test } from 'tap';
import { run } from '../../provider/network/host.js';
import { packageRoot } from '../../provider/package-root.js';
import { portFilterTable } from '../../provider/network/port-filter.js';
import { masqueradeGatewayMac, vmNetworkNames } from '../../provider/network/vm-network.js';
import type { PeerNode } from '../../provider/network/peer-routes.js';
import type { VmSpec } from '../../vmm/spec.js';
import { selfAnnounce } from '../helpers/frames.js';
import { buildRawsend } from '../helpers/rawsend.js';
import type { DriverRequest } from '../helpers/node-network-driver.js';

const DRIVER = join(packageRoot(), 'dist', 'test', 'helpers', 'node-network-driver.js');
const ECHO_PORT = 7777;
const GUEST_MAC = '52:54:00:6d:69:67';

const netnsExec = (ns: string, ...argv: string[]) => run(['ip', 'netns', 'exec', ns, ...argv]);

interface SimNode {
  name: string;
  ns: string;
  address: string;
  podCidr: string;
  peersFile: string;
  hostedFile: string;
  call<T = unknown>(op: DriverRequest['op'], ...args: unknown[]): Promise<T>;
  /** Runs a command in the node's mount namespace, where its VMs' namespaces are named (as on a host of vkvm up). */
  inMounts(...argv: string[]): Promise<string>;
  /** The path of a VM namespace of this node, from anywhere. */
  vmNetns(uid: string): string;
  routeTo(ip: string): Promise<string>;
}

/** A node namespace on the segment with its PodNetwork process. */
async function simNode(t: Test, o: { name: string; seg: string; segBridge: string; address: string; gateway: string; podCidr: string }) {
  const ns = `${o.seg}-${o.name}`;
  const veth = `${o.seg}${o.name}`;
  await run(['ip', 'netns', 'add', ns]);
  t.teardown(() => run(['ip', 'netns', 'del', ns]).catch(() => undefined));
  await run(['ip', '-n', o.seg, 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
  await run(['ip', '-n', o.seg, 'link', 'set', veth, 'master', o.segBridge, 'up']);
  for (const c of [
    ['link', 'set', 'lo', 'up'],
    ['addr', 'add', `${o.address}/24`, 'dev', 'eth0'],
    ['link', 'set', 'eth0', 'up'],
    ['route', 'add', 'default', 'via', o.gateway],
  ])
    await run(['ip', '-n', ns, ...c]);
  const dir = await mkdtemp(join(tmpdir(), `vkvm-moved-${o.name}-`));
  // dnsmasq reads its hosts directory below it as nobody, as below a node's state dir.
  await chmod(dir, 0o711);
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const peersFile = join(dir, 'peers.json');
  const hostedFile = join(dir, 'hosted.json');
  await writeFile(peersFile, '[]');
  const spec = { bridge: 'vkvm0', dir: join(dir, 'network'), podCidr: o.podCidr, peersFile, hostedFile };
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, DRIVER, JSON.stringify(spec)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const reply = JSON.parse(line) as { id: number; ok: boolean; result?: unknown; error?: string };
    const p = pending.get(reply.id);
    pending.delete(reply.id);
    if (reply.ok) p?.resolve(reply.result);
    else p?.reject(new Error(`${o.name}: ${reply.error}`));
  });
  let nextId = 0;
  const call = <T>(op: DriverRequest['op'], ...args: unknown[]) =>
    new Promise<T>((resolve, reject) => {
      const id = ++nextId;
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      child.stdin!.write(`${JSON.stringify({ id, op, args })}\n`);
    });
  t.teardown(async () => {
    await call('close').catch(() => undefined);
    child.stdin!.end();
    await stopped(child);
  });
  const node: SimNode = {
    name: o.name,
    ns,
    address: o.address,
    podCidr: o.podCidr,
    peersFile,
    hostedFile,
    call,
    inMounts: (...argv) => run(['nsenter', `--target=${child.pid}`, '--mount', '--', ...argv]),
    vmNetns: (uid) => `/proc/${child.pid}/root/run/netns/${vmNetworkNames(uid).netns}`,
    routeTo: async (ip) => {
      const [route] = JSON.parse(await run(['ip', '-n', ns, '-j', '-4', 'route', 'get', ip])) as Array<{ gateway?: string; dev: string }>;
      return route?.gateway ? `via ${route.gateway}` : `dev ${route?.dev}`;
    },
  };
  return node;
}

function stopped(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  return new Promise((r) => child.once('exit', () => (clearTimeout(timer), r())));
}

/** A long-running process in a namespace that prints lines; resolves once it printed `ready`. */
async function lineProcess(t: Test, ns: string, script: string, ready: string) {
  const child = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  t.teardown(() => {
    child.kill('SIGKILL');
    return stopped(child);
  });
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: child.stdout! }).on('line', (l) => {
    lines.push(l);
    waiters.splice(0).forEach((w) => w());
  });
  const waitFor = async (line: string, timeoutMs: number): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (!lines.some((l) => l === line || l.startsWith(`${line} `))) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for "${line}"; seen: ${JSON.stringify(lines)}`);
      await new Promise<void>((r) => {
        waiters.push(r);
        setTimeout(r, 100);
      });
    }
  };
  await waitFor(ready, 10_000);
  return { child, lines, waitFor, send: (line: string) => child.stdin!.write(`${line}\n`) };
}

const vmSpec = (uid: string, binding: 'bridge' | 'masquerade' = 'bridge'): VmSpec =>
  ({
    version: 1,
    uid,
    name: `moved-${uid}`,
    cpu: { cores: 1 },
    memoryMiB: 64,
    firmware: 'bios',
    disks: [],
    interfaces: [{ name: 'default', binding, mac: GUEST_MAC }],
    guestAgent: false,
    acpi: true,
    labels: {},
  }) as unknown as VmSpec;

/** Three nodes on one segment, a guest namespace, and what their Node informers would tell them. */
async function threeNodes(t: Test) {
  const r = randomBytes(2).toString('hex');
  const seg = `vkmv${r}`;
  const net = `10.${100 + randomInt(150)}`;
  const lan = `192.168.${randomInt(256)}`;
  await run(['ip', 'netns', 'add', seg]);
  t.teardown(() => run(['ip', 'netns', 'del', seg]).catch(() => undefined));
  await run(['ip', '-n', seg, 'link', 'add', 'seg0', 'type', 'bridge']);
  await run(['ip', '-n', seg, 'addr', 'add', `${lan}.254/24`, 'dev', 'seg0']);
  await run(['ip', '-n', seg, 'link', 'set', 'seg0', 'up']);
  // Made before the nodes' processes, so their mount namespaces (copies taken at their start) name it too.
  const guest = `${seg}-guest`;
  await run(['ip', 'netns', 'add', guest]);
  t.teardown(() => run(['ip', 'netns', 'del', guest]).catch(() => undefined));
  const mk = (name: string, i: number) =>
    simNode(t, { name, seg, segBridge: 'seg0', address: `${lan}.${i}`, gateway: `${lan}.254`, podCidr: `${net}.${i - 1}.0/24` });
  const [a, b, c] = [await mk('a', 1), await mk('b', 2), await mk('c', 3)];
  const peer = (n: SimNode, hosted?: Record<string, string>): PeerNode => ({
    name: n.name,
    podCidr: n.podCidr,
    internalIP: n.address,
    ...(hosted && Object.keys(hosted).length ? { hosted } : {}),
  });
  // What each node's Node informer would hand it; then the repair its change starts.
  const tellPeers = async (hostedByB?: Record<string, string>) => {
    for (const [n, others] of [
      [a, [peer(b, hostedByB), peer(c)]],
      [b, [peer(a), peer(c)]],
      [c, [peer(a), peer(b, hostedByB)]],
    ] as const) {
      await writeFile(n.peersFile, JSON.stringify(others));
      await n.call('ensureNode');
    }
  };
  await tellPeers();

  return { r, net, guest, a, b, c, tellPeers };
}

/** An echo server in the guest and a client on C (a pod address of C's range) connected to it. */
async function echoSession(t: Test, o: { guest: string; c: SimNode; podIP: string; net: string }) {
  const server = await lineProcess(
    t,
    o.guest,
    `let n = 0; require('net').createServer((s) => { console.log('connection ' + ++n); s.pipe(s); }).listen(${ECHO_PORT}, () => console.log('listening'));`,
    'listening',
  );
  // The client: a pod address of node C (its bridge's), so every node lets it in as pod-to-pod traffic.
  const client = await lineProcess(
    t,
    o.c.ns,
    `const s = require('net').connect({ host: '${o.podIP}', port: ${ECHO_PORT}, localAddress: '${o.net}.2.1' }, () => console.log('connected ' + s.localPort));
     s.on('data', (d) => d.toString().split('\\n').filter(Boolean).forEach((l) => console.log('echo ' + l)));
     s.on('close', () => console.log('closed'));
     process.stdin.on('data', (d) => s.write(d));`,
    'connected',
  ).catch(async (err: Error) => {
    throw new Error(`${err.message}; route from C: ${await o.c.routeTo(o.podIP)}`);
  });
  return { server, client };
}

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

  // B published the address; C (told, as its Node informer would be) routes it straight to B.
  const hosted = await publishedBy(b, podIP);
  await tellPeers(hosted);
  // The periodic sweep: A's handed-over record gives way to B's annotation.
  await a.call('retainOnly', []);
  client.send('direct');
  await client.waitFor('echo direct', 20_000);
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
      aLease: podIP,
      aLentTo: 'b',
      aPortChains: [],
      dhcp: `bound ${podIP} router ${net}.0.1`,
      connections: ['connection 1'],
      closed: false,
    },
    'the address is the same; B routes it to the VM, A via B, C via A until told, then via B; one connection throughout',
  );

  // Deleted on B: its /32, annotation and namespace go; A's lease stays lent (released after the grace period).
  await a.call('detach', uidA);
  await b.call('detach', uidB);
  await tellPeers(JSON.parse(await readFile(b.hostedFile, 'utf8')) as Record<string, string>);
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
  await tellPeers(await publishedBy(b, podIP));
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

/** What `n` published once it lists `ip` (publishing follows the claim, in the background). */
async function publishedBy(n: SimNode, ip: string): Promise<Record<string, string>> {
  let hosted: Record<string, string> = {};
  for (const deadline = Date.now() + 10_000; !(ip in hosted); await new Promise((r) => setTimeout(r, 50))) {
    if (Date.now() > deadline) throw new Error(`${n.name} did not publish ${ip}; it published ${JSON.stringify(hosted)}`);
    hosted = JSON.parse(await readFile(n.hostedFile, 'utf8').catch(() => '{}')) as Record<string, string>;
  }
  return hosted;
}

async function fdbPortOf(ns: string, mac: string): Promise<string | undefined> {
  const fdb = JSON.parse(await run(['bridge', '-n', ns, '-j', 'fdb', 'show', 'br', 'vkvm0'])) as Array<{ mac: string; ifname: string }>;
  return fdb.find((e) => e.mac === mac)?.ifname;
}

async function portChains(ns: string): Promise<string[]> {
  const out = await run(['ip', 'netns', 'exec', ns, 'nft', 'list', 'table', 'bridge', portFilterTable('vkvm0')]).catch(() => '');
  return [...out.matchAll(/chain (port-\S+) \{/g)].map((m) => m[1]!);
}

async function slash32s(ns: string): Promise<string[]> {
  const routes = JSON.parse(await run(['ip', '-n', ns, '-j', '-4', 'route', 'show'])) as Array<{ dst: string }>;
  return routes.map((r) => r.dst).filter((d) => /^\d+\.\d+\.\d+\.\d+$/.test(d));
}

// The node bridge's DHCP against real dnsmasq and a real DHCP client (busybox
// udhcpc in a network namespace): fast enough for every run, and the only way
// to see what dnsmasq does with a reused address.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { NodeNetwork } from './node-network.js';
import { links, run } from './host.js';
import { intToIp, parseIpv4Range } from './ipv4.js';

const suffix = randomBytes(3).toString('hex');
const bridge = `vkn${suffix}`;
const range = parseIpv4Range(`10.${100 + (randomBytes(1)[0]! % 100)}.${randomBytes(1)[0]}.0/28`, 'test range');

/** A namespace with one veth on the bridge, as a VM's would be. */
async function client(
  name: string,
  mac: string,
): Promise<{ dhcp(): Promise<string>; resolver(): Promise<string>; close(): Promise<void> }> {
  const netns = `vkn${suffix}-${name}`;
  const hostEnd = `vkn${suffix}${name}`;
  await run(['ip', 'netns', 'add', netns]);
  await run(['ip', 'link', 'add', hostEnd, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns]);
  await run(['ip', 'link', 'set', hostEnd, 'master', bridge, 'up']);
  await run(['ip', '-n', netns, 'link', 'set', 'eth0', 'address', mac, 'up']);
  return {
    // -q: quit once leased; -n: fail rather than go to background; the script is a no-op so the namespace is untouched.
    dhcp: async () => {
      // udhcpc reports on stderr.
      const out = await run(['sh', '-c', `ip netns exec ${netns} busybox udhcpc -i eth0 -q -n -t 4 -T 1 -s /bin/true 2>&1`]).catch(
        (err: Error) => err.message,
      );
      return /lease of (\S+) obtained/.exec(out)?.[1] ?? `no lease: ${out}`;
    },
    // What the lease says of DNS, asking for the search path (option 119) as the test guest does.
    resolver: async () => {
      const script = path.join(await mkdtemp(path.join(tmpdir(), 'vkvm-udhcpc-')), 'print');
      await writeFile(script, '#!/bin/sh\n[ "$1" = bound ] && echo "dns=$dns search=$search"\nexit 0\n', { mode: 0o755 });
      const out = await run([
        'ip',
        'netns',
        'exec',
        netns,
        'busybox',
        'udhcpc',
        '-i',
        'eth0',
        '-q',
        '-n',
        '-t',
        '4',
        '-T',
        '1',
        '-O',
        'search',
        '-s',
        script,
      ]).catch((err: Error) => err.message);
      await rm(path.dirname(script), { recursive: true, force: true });
      return out;
    },
    close: async () => {
      await run(['ip', 'netns', 'del', netns]);
    },
  };
}

t.test('an address served to one VM is served to the next VM given it', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'vkvm-node-network-'));
  const net = new NodeNetwork({ bridge, dir, log: pino({ level: 'silent' }) });
  t.teardown(async () => {
    await net.remove();
    await rm(dir, { recursive: true, force: true });
  });
  await net.ensure(range, []);
  t.ok((await links()).has(bridge), 'the bridge exists');
  const ip = intToIp(range.network + 2);

  const first = await client('a', '02:00:00:00:00:0a');
  await net.addDhcpHost('pod-a', '02:00:00:00:00:0a', ip);
  const acked: string[] = [];
  net.dhcpAcks.onAck((uid) => acked.push(uid));
  const beforeMs = Date.now();
  t.equal(await first.dhcp(), ip, 'the first VM is served its address');
  const ackedAt = await net.dhcpAcks.ackedAtUnixMs('pod-a');
  t.ok(ackedAt && ackedAt >= beforeMs - 10 && ackedAt <= Date.now(), `the lease script recorded when it was ACKed (${ackedAt})`);
  await first.close();
  const pid = () => readFile(path.join(dir, 'dnsmasq.pid'), 'utf8').then((p) => p.trim());
  const pidBefore = await pid();
  await net.removeDhcpHost('pod-a');
  t.not(await pid(), pidBefore, 'dnsmasq restarted, forgetting the removed entry and its lease');
  await t.resolves(readFile(`/proc/${await pid()}/cmdline`), 'and runs');

  const second = await client('b', '02:00:00:00:00:0b');
  t.teardown(() => second.close().catch(() => undefined));
  await net.addDhcpHost('pod-b', '02:00:00:00:00:0b', ip);
  t.equal(await second.dhcp(), ip, 'the second VM, another MAC, is served the same address');
  t.same(await readdir(net.dhcpHostsDir), ['pod-b'], 'only the live VM has a DHCP entry');

  const third = await client('c', '02:00:00:00:00:0c');
  t.teardown(() => third.close().catch(() => undefined));
  await net.addDhcpHost('pod-c', '02:00:00:00:00:0c', intToIp(range.network + 3), {
    nameservers: ['10.96.0.10'],
    searches: ['ns.svc.cluster.local', 'cluster.local'],
  });
  t.match(
    await third.resolver(),
    /dns=10\.96\.0\.10 search=ns\.svc\.cluster\.local cluster\.local/,
    "a VM's own resolver (its tagged options) overrides the node's",
  );
  await net.removeDhcpHost('pod-c');
  t.same(await readdir(net.dhcpOptsDir), [], 'its options go with its entry');
  // dnsmasq 2.90 aborts on SIGHUP with a lease of a tagged entry from its hosts directory: a restart does not.
  await t.resolves(readFile(`/proc/${await pid()}/cmdline`), 'dnsmasq runs after an entry whose lease it held was removed');
  t.same(
    { acked: [...new Set(acked)].sort(), records: (await net.dhcpAcks.recorded()).sort() },
    { acked: ['pod-a', 'pod-b', 'pod-c'], records: ['pod-a', 'pod-b', 'pod-c'] },
    'each VM served is recorded by its uid, and the watch told of each',
  );

  const other = new NodeNetwork({ bridge: `${bridge}x`, dir, log: pino({ level: 'silent' }) });
  await t.rejects(
    other.ensure(range, []),
    { message: new RegExp(`^--bridge: this node's pod network is on ${bridge}; `) },
    'another bridge on the same state is refused',
  );
  t.notOk((await links()).has(`${bridge}x`), 'and nothing of it is created');
  await second.close();
  await other.remove();
  const rules = await run(['iptables-save']);
  t.same(
    { bridge: (await links()).has(bridge), rules: rules.includes(bridge) },
    { bridge: false, rules: false },
    'removal goes by the record: the bridge built and its rules are gone',
  );
});

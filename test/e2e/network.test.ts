// The pod network on the real control plane and a real guest: VMs take
// their pod address by DHCP, are reachable from the node and from each other,
// masquerade forwards only the listed ports (its port filtered as the pod
// address), and create/delete cycles leave no namespace, veth, lease, DHCP
// entry, port filter chain or NAT rule behind.
import { spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { access, readdir, readFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { V1Pod, V1PodSpec } from '@kubernetes/client-node';
import { addresses, links, listRules, run } from '../../provider/network/host.js';
import { hostResolver } from '../../provider/network/resolver.js';
import { mergePatch } from '../../provider/kube/client.js';
import { contains, gatewayOf, parseIpv4Range } from '../../provider/network/ipv4.js';
import { portFilterTable } from '../../provider/network/port-filter.js';
import { vmNetworkNames } from '../../provider/network/vm-network.js';
import {
  isRunningAndReady,
  poll,
  restartAgent,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
  waitForGone,
} from './framework/index.js';

const NODE = 'vkvm-e2e-net';
const NS = 'e2e-net';
const BOOT_DEADLINE_MS = 240_000;
/** The cluster DNS the node is told (nothing answers there: these tests read what the guest was handed). */
const CLUSTER_DNS = '10.96.0.10';

function vmPod(name: string, opts: { network?: 'bridge' | 'masquerade'; ports?: number[]; dns?: Partial<V1PodSpec> } = {}): V1Pod {
  const pod = testGuestPod({
    name,
    node: NODE,
    ...(opts.network ? { annotations: { 'vkvm.io/pod-network': opts.network } } : {}),
    // Graceful (not 0, which the API server deletes at once): the pod goes only after its VM and network did.
    terminationGracePeriodSeconds: 1,
    ...(opts.ports ? { ports: opts.ports } : {}),
  });
  return { ...pod, spec: { ...pod.spec!, ...opts.dns } };
}

/** The VM ports the node bridge's filter has a chain for. */
const portChains = async (bridge: string) =>
  [...(await run(['nft', 'list', 'table', 'bridge', portFilterTable(bridge)])).matchAll(/chain port-(\S+) \{/g)].map((m) => m[1]!);

/** GET http://ip:port/ from the node: the body, or the error code (ECONNREFUSED, a timeout…). */
function httpGet(ip: string, port: number, timeoutMs = 3000): Promise<{ body?: string; error?: string }> {
  return new Promise((resolve) => {
    const req = request({ host: ip, port, path: '/', timeout: timeoutMs }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ body }));
    });
    req.on('timeout', () => req.destroy(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' })));
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ error: err.code ?? err.message }));
    req.end();
  });
}

const exists = (p: string) =>
  access(p).then(
    () => true,
    () => false,
  );

// An HTTP server answering with the client's address, for seeing what a guest's traffic looks like outside.
const ECHO_CLIENT_ADDRESS = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.client_address[0].encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(('0.0.0.0', 8000), H).serve_forever()
`;

/**
 * A network outside the node: a namespace on a veth of its own (198.51.100.0/24,
 * TEST-NET-2), with no route back to the pod range, so only NATed traffic gets answers.
 */
async function startOutsideNetwork(t: Test): Promise<{ serverUrl: string; hostAddress: string }> {
  const ns = `vkvm-e2e-out-${randomBytes(3).toString('hex')}`;
  const veth = `vo${randomBytes(4).toString('hex')}`;
  await run(['ip', 'netns', 'add', ns]);
  t.teardown(() => run(['ip', 'netns', 'del', ns]).catch(() => undefined));
  await run(['ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
  await run(['ip', 'addr', 'add', '198.51.100.1/24', 'dev', veth]);
  await run(['ip', 'link', 'set', veth, 'up']);
  // Replies to NATed traffic are forwarded from where they enter: the agent enables its default-route
  // interface; this stands-in uplink is the test's to enable.
  await run(['sysctl', '-q', '-w', `net.ipv4.conf.${veth}.forwarding=1`]);
  await run(['ip', '-n', ns, 'addr', 'add', '198.51.100.2/24', 'dev', 'eth0']);
  await run(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
  const server = spawn('nsenter', [`--net=/run/netns/${ns}`, '--', 'python3', '-c', ECHO_CLIENT_ADDRESS], { stdio: 'ignore' });
  t.teardown(() => {
    server.kill('SIGKILL');
  });
  await poll(
    'outside server',
    () => run(['nsenter', `--net=/run/netns/${ns}`, '--', 'ss', '-ltn']),
    (out) => out.includes(':8000'),
    { deadlineMs: 10_000, intervalMs: 100 },
  );
  return { serverUrl: 'http://198.51.100.2:8000/', hostAddress: '198.51.100.1' };
}

/** python3: GET http://<argv[2]>/ from source address argv[1]; prints the body. */
const FETCH_FROM = `
import socket, sys
s = socket.create_connection((sys.argv[2], 80), timeout=10, source_address=(sys.argv[1], 0))
s.sendall(b'GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n')
data = b''
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.split(b'\\r\\n\\r\\n', 1)[1].decode())
`;

async function routeTo(cidr: string): Promise<{ dst: string; gateway?: string } | undefined> {
  return (JSON.parse(await run(['ip', '-j', '-4', 'route', 'show', 'exact', cidr])) as Array<{ dst: string; gateway?: string }>)[0];
}

/**
 * Another node's host, as far as this node's network can tell: a namespace on
 * a veth of its own (198.18.x.0/24, the benchmarking range) whose "pod" holds
 * an address in the peer's pod range and serves the echo server there, with
 * the route back to this node's range that the peer's own agent would add.
 */
async function startPeerHost(
  t: Test,
  ownPodCidr: string,
): Promise<{ nodeName: string; podCidr: string; podIP: string; internalIP: string; netnsPath: string }> {
  const id = randomBytes(3).toString('hex');
  const ns = `vkvm-e2e-peer-${id}`;
  const veth = `vp${randomBytes(4).toString('hex')}`;
  const x = randomInt(256);
  const [hostIP, internalIP] = [`198.18.${x}.1`, `198.18.${x}.2`];
  const second = Number(ownPodCidr.split('.')[1]);
  const podCidr = `10.${second}.${randomInt(200)}.0/24`;
  const podIP = podCidr.replace(/0\/24$/, '5');
  await run(['ip', 'netns', 'add', ns]);
  t.teardown(() => run(['ip', 'netns', 'del', ns]).catch(() => undefined));
  await run(['ip', 'link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
  t.teardown(() => run(['ip', 'link', 'del', veth]).catch(() => undefined));
  await run(['ip', 'addr', 'add', `${hostIP}/24`, 'dev', veth]);
  await run(['ip', 'link', 'set', veth, 'up']);
  await run(['ip', '-n', ns, 'addr', 'add', `${internalIP}/24`, 'dev', 'eth0']);
  await run(['ip', '-n', ns, 'link', 'set', 'eth0', 'up']);
  await run(['ip', '-n', ns, 'link', 'set', 'lo', 'up']);
  await run(['ip', '-n', ns, 'addr', 'add', `${podIP}/32`, 'dev', 'lo']);
  await run(['ip', '-n', ns, 'route', 'add', ownPodCidr, 'via', hostIP]);
  const netnsPath = `/run/netns/${ns}`;
  const server = spawn('nsenter', [`--net=${netnsPath}`, '--', 'python3', '-c', ECHO_CLIENT_ADDRESS], { stdio: 'ignore' });
  t.teardown(() => {
    server.kill('SIGKILL');
  });
  await poll(
    'peer pod server',
    () => run(['nsenter', `--net=${netnsPath}`, '--', 'ss', '-ltn']),
    (out) => out.includes(':8000'),
    { deadlineMs: 10_000, intervalMs: 100 },
  );
  return { nodeName: `vkvm-e2e-peer-${id}`, podCidr, podIP, internalIP, netnsPath };
}

t.test('pod network: DHCP, reachability, masquerade, clean-up', async (t) => {
  const cluster = await startTestCluster(t);
  // A /28 (13 VM addresses): the 20 create/delete cycles below wrap around it and reuse addresses.
  // (Node.spec.podCIDR from the controller manager is what the pods and VM suites use.)
  const podCidr = `10.${100 + randomInt(150)}.255.0/28`;
  const agent = await startAgent(t, cluster, { nodeName: NODE, extraArgs: [`--pod-cidr=${podCidr}`, `--cluster-dns=${CLUSTER_DNS}`] });
  // Agents belong to this test: a subtest's teardown would stop the restarted one early.
  const root = t;
  const ns = await testNamespace(t, cluster, NS);
  const readPod = ns.readPod;
  const range = parseIpv4Range(podCidr, 'podCIDR');
  /** Addresses a guest took by DHCP, so a later VM that gets one again must get it by DHCP too. */
  const dhcpServed = new Set<string>();
  const netDir = join(agent.stateDir, 'network');

  const running = (name: string) =>
    waitFor(ns.pod(name), (p) => isRunningAndReady(p) && !!p.status?.podIP, {
      what: 'Running and Ready with an IP',
      deadlineMs: BOOT_DEADLINE_MS,
    });
  const hasIP = (name: string) => waitFor(ns.pod(name), (p) => !!p.status?.podIP, { what: 'an IP', deadlineMs: 120_000 });
  /** The guest's web server answers once DHCP configured its address. */
  const guestAnswers = (ip: string, port = 80) =>
    poll(
      `guest at ${ip}:${port} answers`,
      () => httpGet(ip, port),
      (r) => r.body !== undefined,
      { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 1000 },
    );

  await t.test('bridge binding: the guest holds the pod IP, taken by DHCP; the node and another VM reach it', async (t) => {
    await ns.createPod(vmPod('web-a'));
    await ns.createPod(vmPod('web-b'));
    const [a, b] = [await running('web-a'), await running('web-b')];
    const [ipA, ipB] = [a.status!.podIP!, b.status!.podIP!];
    t.ok(
      contains(range, ipA) && contains(range, ipB) && ipA !== ipB,
      `two distinct pod IPs in the node range ${range.cidr}: ${ipA}, ${ipB}`,
    );
    t.same(a.status!.podIPs, [{ ip: ipA }], 'podIPs too');

    const wide = await ns.kubectl(['get', 'pod', 'web-a', '-o', 'wide', '--no-headers']);
    t.match(
      wide.stdout,
      new RegExp(`^web-a\\s+1/1\\s+Running\\s+\\d+\\s+\\S+\\s+${ipA.replace(/\./g, '\\.')}\\s+${NODE}\\s`),
      'kubectl get pod -o wide shows the IP',
    );

    // The guest's page names the address its DHCP client configured: the pod IP.
    t.same(
      await guestAnswers(ipA),
      { body: `vkvm-guest ${ipA}\n` },
      'a TCP connection from the node reaches the guest, which got the pod IP by DHCP',
    );
    t.same(await guestAnswers(ipB), { body: `vkvm-guest ${ipB}\n` }, 'so does the other guest, at its pod IP');
    const host = await hostResolver();
    t.same(
      (await ns.kubectl(['exec', 'web-a', '--', '/bin/cat', '/etc/resolv.conf'])).stdout,
      `search ${[`${NS}.svc.cluster.local`, 'svc.cluster.local', 'cluster.local', ...host.searches].join(' ')}\nnameserver ${CLUSTER_DNS}\n`,
      "a ClusterFirst guest's resolver, by DHCP: the cluster DNS and its namespace's search path, as a pod's",
    );
    dhcpServed.add(ipA).add(ipB);
    const fromA = await ns.kubectl(['exec', 'web-a', '--', '/bin/wget', '-q', '-O', '-', `http://${ipB}/`], { timeoutMs: 60_000 });
    t.same({ code: fromA.code, out: fromA.stdout }, { code: 0, out: `vkvm-guest ${ipB}\n` }, 'VM a reaches VM b by its pod IP');

    const outside = await startOutsideNetwork(t);
    const egress = await ns.kubectl(['exec', 'web-a', '--', '/bin/wget', '-q', '-O', '-', outside.serverUrl], { timeoutMs: 60_000 });
    t.same(
      { code: egress.code, out: egress.stdout },
      { code: 0, out: outside.hostAddress },
      'traffic leaving the pod range is NATed to the node address',
    );
  });

  await t.test(
    'another node’s pods: its range is routed via its InternalIP, pod to pod without NAT both ways; the route goes with the Node',
    async (t) => {
      const ipA = (await readPod('web-a')).status!.podIP!;
      const peer = await startPeerHost(t, podCidr);
      await cluster.clients.core.createNode({ body: { metadata: { name: peer.nodeName }, spec: { podCIDR: peer.podCidr } } });
      t.teardown(() => cluster.clients.core.deleteNode({ name: peer.nodeName }).catch(() => undefined));
      await cluster.clients.core.patchNodeStatus(
        { name: peer.nodeName, body: { status: { addresses: [{ type: 'InternalIP', address: peer.internalIP }] } } },
        mergePatch,
      );
      const route = await poll(
        'the route to the peer’s pod range',
        () => routeTo(peer.podCidr),
        (r) => r?.gateway === peer.internalIP,
        { deadlineMs: 45_000, intervalMs: 500 },
      );
      t.match(route, { dst: peer.podCidr, gateway: peer.internalIP }, `${peer.podCidr} via ${peer.internalIP}`);

      const fromPeerPod = await run(['nsenter', `--net=${peer.netnsPath}`, '--', 'python3', '-c', FETCH_FROM, peer.podIP, ipA]);
      t.equal(fromPeerPod, `vkvm-guest ${ipA}\n`, "a pod address on the peer opens a connection to this node's guest");
      const toPeerPod = await ns.kubectl(['exec', 'web-a', '--', '/bin/wget', '-q', '-O', '-', `http://${peer.podIP}:8000/`], {
        timeoutMs: 60_000,
      });
      t.same(
        { code: toPeerPod.code, out: toPeerPod.stdout },
        { code: 0, out: ipA },
        "the guest reaches the peer's pod, which sees the guest's own pod IP (no NAT)",
      );

      await cluster.clients.core.deleteNode({ name: peer.nodeName });
      const after = await poll(
        'the peer route removed with its Node',
        () => routeTo(peer.podCidr),
        (r) => r === undefined,
        { deadlineMs: 45_000, intervalMs: 500 },
      ).catch(() => routeTo(peer.podCidr));
      t.equal(after, undefined, 'deleting the peer Node removes the route');
    },
  );

  await t.test('a bridge deleted behind the agent’s back is rebuilt by the next repair, with its running VMs back on it', async (t) => {
    const ipA = (await readPod('web-a')).status!.podIP!;
    await run(['ip', 'link', 'del', agent.bridge]);
    // Nothing is sent until the bridge holds the gateway address again: until then the pod range has no
    // route on this host, and a request to a pod IP would leave by the default route.
    const gateway = `${gatewayOf(range)}/${range.prefixLength}`;
    const rebuilt = await poll(
      'the bridge re-created with the gateway address',
      () => addresses(agent.bridge).catch(() => [] as string[]),
      (a) => a.includes(gateway),
      {
        deadlineMs: 90_000,
        intervalMs: 500,
      },
    );
    t.ok(rebuilt.includes(gateway), `the repair re-created ${agent.bridge} with ${gateway}`);
    const back = await poll(
      'the guest reachable again',
      () => httpGet(ipA, 80),
      (r) => r.body !== undefined,
      { deadlineMs: 60_000, intervalMs: 1000 },
    );
    t.same(
      back,
      { body: `vkvm-guest ${ipA}\n` },
      'the repair re-created the bridge and put the running VM back on it, no pod change needed',
    );
  });

  await t.test('masquerade: the guest sits behind the pod IP; listed ports are forwarded, others are not', async (t) => {
    const dns = {
      dnsPolicy: 'None',
      dnsConfig: { nameservers: ['192.0.2.10', '192.0.2.11'], searches: ['team.example'], options: [{ name: 'ndots', value: '2' }] },
    };
    await ns.createPod(vmPod('nat', { network: 'masquerade', ports: [80], dns }));
    const ip = (await running('nat')).status!.podIP!;
    t.ok(contains(range, ip), `pod IP ${ip} in the node range`);
    t.same(await guestAnswers(ip, 80), { body: 'vkvm-guest 10.0.2.2\n' }, 'port 80 is forwarded to the guest, which took 10.0.2.2 by DHCP');
    const unlisted = await httpGet(ip, 8080);
    t.equal(unlisted.body, undefined, `port 8080 (the guest listens there too) is not forwarded: ${unlisted.error}`);
    const egress = await ns.kubectl(
      ['exec', 'nat', '--', '/bin/wget', '-q', '-O', '-', `http://${(await readPod('web-a')).status!.podIP}/`],
      { timeoutMs: 60_000 },
    );
    t.match(egress, { code: 0, stdout: /^vkvm-guest / }, 'the masquerade guest reaches another VM through NAT');
    t.same(
      (await ns.kubectl(['exec', 'nat', '--', '/bin/cat', '/etc/resolv.conf'])).stdout,
      'search team.example\nnameserver 192.0.2.10\nnameserver 192.0.2.11\n',
      "dnsPolicy None: the guest's resolver is the pod's dnsConfig alone, by its own DHCP",
    );
    const warned = await poll(
      'the DNSConfigForming event',
      async () =>
        (
          await cluster.clients.core.listNamespacedEvent({
            namespace: NS,
            fieldSelector: 'involvedObject.name=nat,reason=DNSConfigForming',
          })
        ).items,
      (items) => items.length > 0,
      { deadlineMs: 30_000, intervalMs: 1000 },
    );
    t.match(
      warned[0]?.message,
      /resolver options cannot be handed to a VM's guest by DHCP and are not applied: ndots:2/,
      'options it cannot hand on are said, not dropped silently',
    );
    const veth = vmNetworkNames((await readPod('nat')).metadata!.uid!).hostVeth;
    t.match(
      await run(['nft', 'list', 'chain', 'bridge', portFilterTable(agent.bridge), `port-${veth}`]),
      `ip saddr ${ip} accept`,
      'its port lets out the pod address (the guest’s 10.0.2.2 never leaves the namespace)',
    );
  });

  await t.test('deleting the VMs removes their namespaces, veths, leases and DHCP entries', async (t) => {
    const pods = await Promise.all(['web-a', 'web-b', 'nat'].map((n) => readPod(n)));
    for (const p of pods) await cluster.clients.core.deleteNamespacedPod({ name: p.metadata!.name!, namespace: NS });
    await waitForGone(ns.pods(), { deadlineMs: 120_000 });
    // The kernel destroys a namespace asynchronously; its veth may be listed a moment longer.
    const left = await poll(
      'namespaces and veths gone',
      async () => {
        const hostLinks = await links();
        const found = [];
        for (const p of pods) {
          const names = vmNetworkNames(p.metadata!.uid!);
          if (await exists(names.netnsPath)) found.push(names.netnsPath);
          if (hostLinks.has(names.hostVeth)) found.push(names.hostVeth);
        }
        return found;
      },
      (found) => found.length === 0,
      { deadlineMs: 10_000, intervalMs: 200 },
    ).catch((err: Error) => err.message);
    t.same(left, [], 'no namespace or veth left');
    t.same(JSON.parse(await readFile(join(netDir, 'leases.json'), 'utf8')).leases, {}, 'no lease left');
    t.same(
      [...(await readdir(join(netDir, 'dhcp-hosts'))), ...(await readdir(join(netDir, 'dhcp-opts')))],
      [],
      'no DHCP entry or resolver options left',
    );
    t.same(await portChains(agent.bridge), [], 'no port filter chain left');
  });

  await t.test('20 create/delete cycles wrap the range, leave nothing behind, and a reused address is served again', async (t) => {
    const natBefore = await listRules('nat', `VKVM-NAT-${agent.bridge}`);
    const seen: string[] = [];
    const uids: string[] = [];
    // Bindings alternate; the cycles after the range wrapped take web-a's and web-b's addresses back, as bridge VMs, so DHCP must serve them again.
    for (let i = 0; i < 20; i++) {
      const name = `cycle-${i}`;
      const binding = i % 2 && i < 10 ? 'masquerade' : 'bridge';
      await ns.createPod(vmPod(name, { network: binding, ports: [80] }));
      const pod = await hasIP(name);
      const ip = pod.status!.podIP!;
      seen.push(ip);
      uids.push(pod.metadata!.uid!);
      if (binding === 'bridge' && dhcpServed.has(ip)) {
        // dnsmasq remembers leases: the address must have been released with the VM that held it.
        t.same(await guestAnswers(ip), { body: `vkvm-guest ${ip}\n` }, `${ip}, reused, is served by DHCP to the new VM's MAC`);
        dhcpServed.delete(ip);
      }
      await cluster.clients.core.deleteNamespacedPod({ name, namespace: NS });
      await waitForGone(ns.pods(), { deadlineMs: 120_000 });
    }
    t.equal(new Set(seen.slice(0, 10)).size, 10, `round-robin: no address comes back before the range wrapped (${seen.join(' ')})`);
    t.ok(
      seen.some((ip, i) => seen.indexOf(ip) < i),
      'the range wrapped',
    );
    t.equal(dhcpServed.size, 0, 'every address a guest had held by DHCP was reused and served again');
    const leftovers = async () => {
      const hostLinks = await links();
      const netns = (await run(['ip', 'netns', 'list'])).split('\n');
      return uids.flatMap((uid) => {
        const n = vmNetworkNames(uid);
        return [...(hostLinks.has(n.hostVeth) ? [n.hostVeth] : []), ...netns.filter((l) => l.startsWith(n.netns))];
      });
    };
    const left = await poll('veths and namespaces gone', leftovers, (l) => l.length === 0, { deadlineMs: 10_000, intervalMs: 200 }).catch(
      () => leftovers(),
    );
    t.same(left, [], 'no veth or namespace left');
    const hostLinks = await links();
    const taps = [...hostLinks.keys()].filter((l) => l.startsWith('tap') || l.startsWith('vnet'));
    t.same(
      taps.filter((l) => l === 'tap0'),
      [],
      'no guest tap in the host namespace',
    );
    t.same(JSON.parse(await readFile(join(netDir, 'leases.json'), 'utf8')).leases, {}, 'no lease left');
    t.same(
      [...(await readdir(join(netDir, 'dhcp-hosts'))), ...(await readdir(join(netDir, 'dhcp-opts')))],
      [],
      'no DHCP entry or resolver options left',
    );
    t.same(await readdir(join(netDir, 'vms')).catch(() => []), [], 'no per-VM network state left');
    t.same(await listRules('nat', `VKVM-NAT-${agent.bridge}`), natBefore, 'the node NAT rules are unchanged');
    t.same(await portChains(agent.bridge), [], 'no port filter chain left');
  });

  await t.test('after an agent crash, the network of a pod deleted meanwhile is removed at start; running VMs keep theirs', async (t) => {
    await ns.createPod(vmPod('survivor'));
    await ns.createPod(vmPod('doomed'));
    const survivor = await running('survivor');
    const doomed = await hasIP('doomed');
    const ip = survivor.status!.podIP!;
    t.same(await guestAnswers(ip), { body: `vkvm-guest ${ip}\n` }, 'the survivor answers on its pod IP before the crash');
    await agent.kill('SIGKILL');
    await cluster.clients.core.deleteNamespacedPod({ name: 'doomed', namespace: NS, body: { gracePeriodSeconds: 0 } });
    await restartAgent(root, cluster, agent);
    const names = vmNetworkNames(doomed.metadata!.uid!);
    const leases = () => readFile(join(netDir, 'leases.json'), 'utf8').then((s) => JSON.parse(s).leases as Record<string, string>);
    const state = await poll(
      "the deleted pod's network removed",
      async () => ({ netns: await exists(names.netnsPath), veth: (await links()).has(names.hostVeth), leases: await leases() }),
      (s) => !s.netns && !s.veth && !(doomed.metadata!.uid! in s.leases),
      { deadlineMs: 60_000 },
    );
    t.same(
      state,
      { netns: false, veth: false, leases: { [survivor.metadata!.uid!]: ip } },
      'no namespace, veth or lease of the deleted pod; the survivor keeps its lease',
    );
    t.same(await httpGet(ip, 80), { body: `vkvm-guest ${ip}\n` }, 'the surviving VM still answers on its address');
  });
});

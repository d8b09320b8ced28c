// Simulated nodes for network tests that need several on one machine
// (test/integration/moved-address.test.ts): network namespaces on a segment
// (itself a namespace), as `vkvm up --nodes N` builds them, each with a real
// PodNetwork in its own process (node-network-driver.ts), a guest namespace,
// and an echo session across them.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import { run } from '../../provider/network/host.js';
import { packageRoot } from '../../provider/package-root.js';
import { portFilterTable } from '../../provider/network/port-filter.js';
import { vmNetworkNames } from '../../provider/network/vm-network.js';
import type { PeerNode } from '../../provider/network/peer-routes.js';
import type { VmSpec } from '../../vmm/spec.js';
import type { DriverRequest } from './node-network-driver.js';

const DRIVER = join(packageRoot(), 'dist', 'test', 'helpers', 'node-network-driver.js');
export const ECHO_PORT = 7777;
export const GUEST_MAC = '52:54:00:6d:69:67';

export const netnsExec = (ns: string, ...argv: string[]) => run(['ip', 'netns', 'exec', ns, ...argv]);

export interface SimNode {
  name: string;
  ns: string;
  address: string;
  podCidr: string;
  peersFile: string;
  hostedFile: string;
  lentFile: string;
  call<T = unknown>(op: DriverRequest['op'], ...args: unknown[]): Promise<T>;
  /** Runs a command in the node's mount namespace, where its VMs' namespaces are named (as on a host of vkvm up). */
  inMounts(...argv: string[]): Promise<string>;
  /** The path of a VM namespace of this node, from anywhere. */
  vmNetns(uid: string): string;
  routeTo(ip: string): Promise<string>;
}

/** A node namespace on the segment with its PodNetwork process. */
export async function simNode(
  t: Test,
  o: { name: string; seg: string; segBridge: string; address: string; gateway: string; podCidr: string },
) {
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
  const lentFile = join(dir, 'lent.json');
  await writeFile(peersFile, '[]');
  const spec = { name: o.name, bridge: 'vkvm0', dir: join(dir, 'network'), podCidr: o.podCidr, peersFile, hostedFile, lentFile };
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
    lentFile,
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

export function stopped(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  return new Promise((r) => child.once('exit', () => (clearTimeout(timer), r())));
}

/** A long-running process in a namespace that prints lines; resolves once it printed `ready`. */
export async function lineProcess(t: Test, ns: string, script: string, ready: string) {
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

export const vmSpec = (uid: string, binding: 'bridge' | 'masquerade' = 'bridge'): VmSpec =>
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

/** What a node published: its claims (hosted) and lendings (lent), as its Node's two annotations. */
export interface Published {
  hosted: Record<string, string>;
  lent: Record<string, string>;
}

async function publishedNow(n: SimNode): Promise<Published> {
  const read = async (file: string) => JSON.parse(await readFile(file, 'utf8').catch(() => '{}')) as Record<string, string>;
  return { hosted: await read(n.hostedFile), lent: await read(n.lentFile) };
}

/** Three nodes on one segment, a guest namespace, and what their Node informers would tell them. */
export async function threeNodes(t: Test) {
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
  const nodes = [a, b, c];
  const peer = (n: SimNode, p: Published): PeerNode => ({
    name: n.name,
    podCidr: n.podCidr,
    internalIP: n.address,
    ...(Object.keys(p.hosted).length ? { hosted: p.hosted } : {}),
    ...(Object.keys(p.lent).length ? { lent: p.lent } : {}),
  });
  /**
   * What each node's Node informer would hand it (what the others published
   * now; `forged`: annotations a node wrote instead); then the repair its
   * change starts.
   */
  const tellPeers = async (forged: Record<string, Partial<Published>> = {}) => {
    const all = await Promise.all(nodes.map(async (n) => peer(n, { ...(await publishedNow(n)), ...forged[n.name] })));
    for (const n of nodes) {
      await writeFile(n.peersFile, JSON.stringify(all.filter((p) => p.name !== n.name)));
      await n.call('ensureNode');
    }
  };
  await tellPeers();

  return { r, net, guest, a, b, c, tellPeers };
}

/** An echo server in the guest and a client on C (a pod address of C's range) connected to it. */
export async function echoSession(t: Test, o: { guest: string; c: SimNode; podIP: string; net: string }) {
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

/** What `n` published once it lists `ip` as hosted (or `lent`): publishing follows the claim and the hand-over, in the background. */
export async function publishedBy(n: SimNode, ip: string, kind: keyof Published = 'hosted'): Promise<Record<string, string>> {
  let listed: Record<string, string> = {};
  for (const deadline = Date.now() + 10_000; !(ip in listed); await new Promise((r) => setTimeout(r, 50))) {
    if (Date.now() > deadline) throw new Error(`${n.name} did not publish ${ip} as ${kind}; it published ${JSON.stringify(listed)}`);
    listed = (await publishedNow(n))[kind];
  }
  return listed;
}

/** Once `n` no longer publishes `ip` as hosted (or `lent`). */
export async function withdrawnBy(n: SimNode, ip: string, kind: keyof Published = 'hosted'): Promise<void> {
  for (const deadline = Date.now() + 10_000; ip in (await publishedNow(n))[kind]; await new Promise((r) => setTimeout(r, 50)))
    if (Date.now() > deadline) throw new Error(`${n.name} still publishes ${ip} as ${kind}`);
}

export async function fdbPortOf(ns: string, mac: string): Promise<string | undefined> {
  const fdb = JSON.parse(await run(['bridge', '-n', ns, '-j', 'fdb', 'show', 'br', 'vkvm0'])) as Array<{ mac: string; ifname: string }>;
  return fdb.find((e) => e.mac === mac)?.ifname;
}

export async function portChains(ns: string): Promise<string[]> {
  const out = await run(['ip', 'netns', 'exec', ns, 'nft', 'list', 'table', 'bridge', portFilterTable('vkvm0')]).catch(() => '');
  return [...out.matchAll(/chain (port-\S+) \{/g)].map((m) => m[1]!);
}

export async function slash32s(ns: string): Promise<string[]> {
  const routes = JSON.parse(await run(['ip', '-n', ns, '-j', '-4', 'route', 'show'])) as Array<{ dst: string }>;
  return routes.map((r) => r.dst).filter((d) => /^\d+\.\d+\.\d+\.\d+$/.test(d));
}

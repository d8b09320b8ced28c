// The relay end to end on loopback: real TLS 1.3 with node certificates from a
// fake CA, real unix sockets standing in for the target launcher's.
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { connect, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { connect as connectTls } from 'node:tls';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { newCa, type TestCa } from '../../test/helpers/fake-ca.js';
import { issuePair, nodeClientPair, nodeServingPair } from '../../test/helpers/relay-certs.js';
import { MAX_HEADER_BYTES, parseReply } from './frames.js';
import { readLine } from './line-reader.js';
import type { MigrationFacts } from './relay-auth.js';
import { RelayClient, type RelayTarget } from './relay-client.js';
import { RelayServer, type AcceptedControl } from './relay-server.js';
import type { RelayCredentials } from './relay-tls.js';

const log = pino({ level: 'silent' });
const UID = '3f1c2a7e-5b0d-4c8e-9a61-2d4f8b7c9e10';
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex').slice(0, 16);

/** Sockets, servers and pipes the process holds: what a leak would add to. */
const handles = (): string[] => process.getActiveResourcesInfo().filter((r) => /TCP|Pipe|TLS/.test(r));

/** A scratch dir with a short path: a unix socket path holds 107 bytes, which t.testdir() paths outgrow. */
async function shortDir(t: Test): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'relay-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function fixture(t: Test, opts: { servingAs?: string } = {}) {
  const ca = await newCa();
  const dir = await shortDir(t);
  const vmDir = join(dir, 'target-vm');
  await mkdir(join(vmDir, 'libvirt', 'run', 'm'), { recursive: true });
  const controls: AcceptedControl[] = [];
  const lookups: string[] = [];
  const facts: MigrationFacts = { migrationState: { migrationUid: UID, sourceNode: 'a', targetNode: 'b' }, targetPod: { vmDir } };
  const server = new RelayServer({
    selfNode: 'b',
    credentials: await nodeServingPair(ca, opts.servingAs ?? 'b'),
    lookup: async (uid) => {
      lookups.push(uid);
      return facts;
    },
    onControl: (c) => void controls.push(c),
    log,
  });
  const { port } = await server.listen(0, '127.0.0.1');
  t.teardown(() => server.close());
  const client = (credentials: RelayCredentials): RelayClient => {
    const c = new RelayClient({ credentials: () => credentials, log });
    t.teardown(() => c.close());
    return c;
  };
  const target: RelayTarget = { uid: UID, node: 'b', address: '127.0.0.1', port };
  return { ca, dir, vmDir, server, controls, lookups, client, target, sourceA: client(await nodeClientPair(ca, 'a')) };
}

/** A stand-in for a launcher socket: reads `expect` bytes, sends `reply`, then ends; or holds the connection when expect is Infinity. */
async function launcherSocket(t: Test, path: string, expect: number, reply: Buffer) {
  const connections: { socket: Socket; received: Promise<Buffer> }[] = [];
  const server = createServer((socket) => {
    socket.on('error', () => {});
    socket.write(reply);
    const received = new Promise<Buffer>((resolve) => {
      const chunks: Buffer[] = [];
      let size = 0;
      socket.on('data', (c: Buffer) => {
        chunks.push(c);
        size += c.length;
        if (size >= expect) socket.end();
      });
      socket.once('close', () => resolve(Buffer.concat(chunks)));
    });
    connections.push({ socket, received });
  });
  server.listen(path);
  await once(server, 'listening');
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return {
    connections,
    connected: async () => (connections.length > 0 ? connections[0]! : (await once(server, 'connection'), connections[0]!)),
  };
}

async function readAll(s: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

t.test('a few MiB cross the relay intact both ways, after control and ready', async (t) => {
  const f = await fixture(t);
  await f.sourceA.dial(f.target, 'control', 0);
  t.same(
    f.controls.map((c) => ({ uid: c.uid, peerNode: c.peerNode })),
    [{ uid: UID, peerNode: 'a' }],
    'the control stream goes to the target side',
  );
  f.server.markReady(UID);
  const toTarget = randomBytes(4 * 2 ** 20);
  const toSource = randomBytes(3 * 2 ** 20);
  const launcher = await launcherSocket(t, join(f.vmDir, 'libvirt', 'run', 'm', 'mem'), toTarget.length, toSource);
  const sourcePath = join(f.dir, 'mem');
  await f.sourceA.listen(f.target, 'memory', sourcePath);
  const local = connect(sourcePath);
  local.write(toTarget);
  const atSource = await readAll(local);
  const atTarget = await (await launcher.connected()).received;
  t.same(
    { toTarget: sha(atTarget), toSource: sha(atSource), lookups: f.lookups.length },
    { toTarget: sha(toTarget), toSource: sha(toSource), lookups: 1 },
    'both directions arrive byte for byte, and the API was read once for the migration',
  );
});

t.test('streams are refused with the reason: another node, a non-node certificate, data before ready', async (t) => {
  const f = await fixture(t);
  const nodeC = f.client(await nodeClientPair(f.ca, 'c'));
  const admin = f.client(await issuePair(f.ca, 'CN=admin, O=system:masters', { usage: 'client' }));
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => 'accepted',
      (err: Error) => `${err.name}: ${err.message}`,
    );
  t.same(
    {
      otherNode: await refusal(nodeC.dial(f.target, 'control', 0)),
      notANode: await refusal(admin.dial(f.target, 'control', 0)),
      memoryBeforeReady: await refusal(f.sourceA.dial(f.target, 'memory', 0)),
      controls: f.controls.length,
    },
    {
      otherNode: `RelayRefusedError: node b refused the control stream: migration ${UID} runs from node a, not from c`,
      notANode:
        "RelayRefusedError: node b refused the control stream: the client certificate is not a node's (want CN system:node:<name>, O system:nodes)",
      memoryBeforeReady: `RelayRefusedError: node b refused the memory stream: a memory stream of migration ${UID} before the target is ready`,
      controls: 0,
    },
  );
});

t.test('a certificate from another CA or TLS 1.2 fails the handshake; a garbage header is answered with the reason', async (t) => {
  const f = await fixture(t);
  const stranger = f.client(await nodeClientPair(await newCa(), 'a'));
  await t.rejects(stranger.dial(f.target, 'control', 0), /migration relay to node b at 127\.0\.0\.1:\d+: /);
  const pair12 = await nodeClientPair(f.ca, 'a');
  const tls12 = connectTls({
    host: '127.0.0.1',
    port: f.target.port,
    ca: pair12.caPem,
    cert: pair12.certPem,
    key: pair12.keyPem,
    maxVersion: 'TLSv1.2',
  });
  tls12.on('error', () => {});
  const [refused] = (await once(tls12, 'error')) as [NodeJS.ErrnoException];
  t.match(refused, { code: /^ERR_SSL_/ }, 'TLS 1.2 is refused');
  tls12.destroy();
  const pair = await nodeClientPair(f.ca, 'a');
  const raw = connectTls({ host: '127.0.0.1', port: f.target.port, ca: pair.caPem, cert: pair.certPem, key: pair.keyPem, servername: '' });
  t.teardown(() => raw.destroy());
  await once(raw, 'secureConnect');
  raw.write('GET / HTTP/1.1\n');
  t.same(parseReply(await readLine(raw, MAX_HEADER_BYTES, 'reply')), { ok: false, reason: 'header: is not JSON' });
});

t.test("the client refuses a relay that presents another node's certificate, before sending anything", async (t) => {
  const f = await fixture(t, { servingAs: 'c' });
  await t.rejects(f.sourceA.dial(f.target, 'control', 0), {
    name: 'RelayRefusedError',
    message: 'the relay at 127.0.0.1 presents "system:node:c", not node b',
  });
  t.same(f.lookups, [], 'the server never saw a header');
  f.server.setCredentials(await nodeServingPair(f.ca, 'b'));
  await t.resolves(f.sourceA.dial(f.target, 'control', 0), 'a rotated serving certificate is used from the next connection');
});

t.test('closeAll on either side closes both legs; the next stream reads the API again', async (t) => {
  const f = await fixture(t);
  await f.sourceA.dial(f.target, 'control', 0);
  f.server.markReady(UID);
  const launcher = await launcherSocket(t, join(f.vmDir, 'libvirt', 'run', 'm', 'nbd'), Infinity, Buffer.from('NBDMAGIC'));
  const sourcePath = join(f.dir, 'nbd');
  await f.sourceA.listen(f.target, 'disk', sourcePath);

  const first = connect(sourcePath);
  first.on('error', () => {});
  await once(first, 'data');
  const firstLauncher = launcher.connections[0]!.socket;
  f.server.closeAll(UID);
  await Promise.all([once(first, 'close'), once(firstLauncher, 'close')]);

  await f.sourceA.dial(f.target, 'control', 0);
  f.server.markReady(UID);
  const second = connect(sourcePath);
  second.on('error', () => {});
  await once(second, 'data');
  const secondLauncher = launcher.connections[1]!.socket;
  const secondClosed = Promise.all([once(second, 'close'), once(secondLauncher, 'close')]);
  await f.sourceA.closeAll(UID);
  await secondClosed;
  t.same(
    {
      lookups: f.lookups.length,
      sourceSocket: await stat(sourcePath).then(
        () => 'left',
        () => 'gone',
      ),
    },
    { lookups: 2, sourceSocket: 'gone' },
  );
});

t.test('source sockets are 0600 and owned as asked; a file that is not a socket is left alone', async (t) => {
  const f = await fixture(t);
  const path = join(f.dir, 'lv');
  await f.sourceA.listen(f.target, 'libvirt', path, { uid: 4242, gid: 4243 });
  const st = await stat(path);
  t.same({ mode: st.mode & 0o777, uid: st.uid, gid: st.gid, socket: st.isSocket() }, { mode: 0o600, uid: 4242, gid: 4243, socket: true });
  const file = join(f.dir, 'not-a-socket');
  await writeFile(file, 'x');
  await t.rejects(f.sourceA.listen(f.target, 'memory', file), /not-a-socket exists and is not a socket/);
});

t.test('nothing is left open after streams ran and both ends closed', async (t) => {
  const before = handles();
  const ca: TestCa = await newCa();
  const dir = await shortDir(t);
  await mkdir(join(dir, 'vm', 'libvirt', 'run', 'm'), { recursive: true });
  const server = new RelayServer({
    selfNode: 'b',
    credentials: await nodeServingPair(ca, 'b'),
    lookup: async () => ({
      migrationState: { migrationUid: UID, sourceNode: 'a', targetNode: 'b' },
      targetPod: { vmDir: join(dir, 'vm') },
    }),
    onControl: () => {},
    log,
  });
  const { port } = await server.listen(0, '127.0.0.1');
  const client = new RelayClient({ credentials: await nodeClientPair(ca, 'a').then((p) => () => p), log });
  const target = { uid: UID, node: 'b', address: '127.0.0.1', port };
  const launcher = createServer((s) => s.on('error', () => {}).pipe(s));
  launcher.listen(join(dir, 'vm', 'libvirt', 'run', 'm', 'mem'));
  await once(launcher, 'listening');
  await client.dial(target, 'control', 0);
  server.markReady(UID);
  await client.listen(target, 'memory', join(dir, 'mem'));
  const local = connect(join(dir, 'mem'));
  const localClosed = once(local, 'close');
  local.write('ping');
  await once(local, 'data');
  await client.close();
  await server.close();
  await new Promise<void>((resolve) => launcher.close(() => resolve()));
  await localClosed;
  // Handles go away as their close callbacks run.
  for (let i = 0; i < 100 && handles().length > before.length; i++) await new Promise((r) => setImmediate(r));
  t.same(
    {
      handles: handles(),
      sourceSocket: await stat(join(dir, 'mem')).then(
        () => 'left',
        () => 'gone',
      ),
    },
    { handles: before, sourceSocket: 'gone' },
  );
});

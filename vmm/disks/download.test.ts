// Image URLs against real servers on this machine: what the node's download
// policy refuses is refused before any byte is sent to it, redirects are
// checked hop by hop, and a body past the size cap leaves nothing behind.
import { createServer } from 'node:http';
import { readdir } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { SpecError } from '../errors.js';
import { recordingLog } from '../testing/log.js';
import { rejection } from '../testing/rejection.js';
import { TEST_QEMU_OWNER, testSpec } from '../testing/specs.js';
import { DEFAULT_DOWNLOAD_POLICY, refusalOf, type DownloadPolicy } from './download-policy.js';
import { prepareDisks } from './prepare.js';

/** A server on `host` answering every path with `handler`, counting requests. */
async function serve(t: Test, host: string, handler: (path: string, res: import('node:http').ServerResponse) => void) {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    seen.push(req.url ?? '');
    handler(req.url ?? '', res);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { base: `http://${host}:${(server.address() as AddressInfo).port}`, seen };
}

async function fetchAsDisk(t: Test, url: string, downloads: DownloadPolicy) {
  const root = t.testdir();
  const { log } = recordingLog();
  const spec = testSpec({ disks: [{ name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'url', url } }] });
  const err = await rejection(
    prepareDisks(spec, { vmDir: join(root, 'vm'), cacheDir: join(root, 'cache'), downloads, owner: TEST_QEMU_OWNER }, log),
  );
  const cache = await readdir(join(root, 'cache')).catch(() => []);
  return { err, cache };
}

t.test('addresses of the node and its local services are refused by rule', async (t) => {
  const policy = { ...DEFAULT_DOWNLOAD_POLICY, deniedCidrs: ['10.96.0.0/12'] };
  const own = Object.values(networkInterfaces())
    .flatMap((l) => l ?? [])
    .find((i) => !i.internal && i.family === 'IPv4')?.address;
  t.match(
    {
      loopback: refusalOf('127.0.0.1', policy),
      loopbackV6: refusalOf('::1', policy),
      mapped: refusalOf('::ffff:127.0.0.1', policy),
      metadata: refusalOf('169.254.169.254', policy),
      unspecified: refusalOf('0.0.0.0', policy),
      serviceIp: refusalOf('10.96.0.1', policy),
      ...(own ? { nodeOwn: refusalOf(own, policy) } : {}),
      elsewhere: refusalOf('10.200.0.7', policy),
      exception: refusalOf('127.0.0.2', { ...policy, allowedCidrs: ['127.0.0.2/32'] }),
    },
    {
      loopback: /loopback/,
      loopbackV6: /loopback/,
      mapped: /loopback/,
      metadata: /link-local/,
      unspecified: /unspecified/,
      serviceIp: /10\.96\.0\.0\/12/,
      ...(own ? { nodeOwn: /address of this node/ } : {}),
      elsewhere: undefined,
      exception: undefined,
    },
  );
});

t.test('a URL on the node is refused naming the field, and the server never hears of it', async (t) => {
  const target = await serve(t, '127.0.0.1', (_p, res) => res.end('secret'));
  for (const url of [`${target.base}/disk.img`, `http://localhost:${new URL(target.base).port}/disk.img`]) {
    const { err, cache } = await fetchAsDisk(t, url, DEFAULT_DOWNLOAD_POLICY);
    t.ok(err instanceof SpecError, url);
    t.match((err as SpecError).causes, [{ path: 'disks[0].source.url', reason: 'FieldValueForbidden', message: /loopback/ }]);
    t.same(cache, [], 'nothing cached');
  }
  t.same(target.seen, [], 'no request reached the loopback server');
});

t.test('a redirect from an allowed server to a loopback port is refused at the hop', async (t) => {
  const target = await serve(t, '127.0.0.1', (_p, res) => res.end('secret'));
  // 127.0.0.2 stands for an allowed remote server: the operator's exception lets downloads reach it, and only it.
  const allowed = await serve(t, '127.0.0.2', (_p, res) => res.writeHead(302, { location: `${target.base}/latest/meta-data` }).end());
  const policy = { ...DEFAULT_DOWNLOAD_POLICY, allowedCidrs: ['127.0.0.2/32'] };
  const { err, cache } = await fetchAsDisk(t, `${allowed.base}/disk.img`, policy);
  t.match(err, {
    causes: [{ path: 'disks[0].source.url', reason: 'FieldValueForbidden', message: /127\.0\.0\.1 is the node's loopback/ }],
  });
  t.same({ allowed: allowed.seen, target: target.seen, cache }, { allowed: ['/disk.img'], target: [], cache: [] });
});

t.test('a body streaming past the size cap stops at the cap, with a clear error and no partial file', async (t) => {
  let sent = 0;
  const chunk = Buffer.alloc(64 * 1024, 1);
  const endless = await serve(t, '127.0.0.2', (_p, res) => {
    res.writeHead(200);
    const pump = (): void => {
      while (sent < 64 * 2 ** 20 && res.write(chunk)) sent += chunk.length;
      if (sent < 64 * 2 ** 20) res.once('drain', pump);
      else res.end();
    };
    pump();
  });
  const policy = { ...DEFAULT_DOWNLOAD_POLICY, maxBytes: 2 * 2 ** 20, allowedCidrs: ['127.0.0.2/32'] };
  const { err, cache } = await fetchAsDisk(t, `${endless.base}/huge.img`, policy);
  t.match(err, { causes: [{ path: 'disks[0].source.url', reason: 'FieldValueInvalid', message: /larger than this node's 2 MiB cap/ }] });
  t.same(cache, [], 'no partial file in the cache');
  t.ok(sent < 64 * 2 ** 20, 'the download stopped before the server finished');
});

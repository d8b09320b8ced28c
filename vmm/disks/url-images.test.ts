// http(s) images end to end against a local node:http server: download once
// into the content-addressed cache, overlay per VM, clean failure.
import t, { type Test } from 'tap';
import { createServer, type Server } from 'node:http';
import { readFile, readdir } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { prepareDisks } from './prepare.js';
import { imageCachePath } from './image-cache.js';
import { DEFAULT_DOWNLOAD_POLICY } from './download-policy.js';
import { readImageInfo } from './qemu-img.js';
import { run } from '../exec.js';
import { recordingLog } from '../testing/log.js';
import { rejection } from '../testing/rejection.js';
import { TEST_QEMU_OWNER, testSpec } from '../testing/specs.js';
import type { DiskSpec } from '../spec.js';

const MiB = 1024 * 1024;
/** The test server is on loopback, which only an operator's exception lets a download reach. */
const LOOPBACK_DOWNLOADS = { ...DEFAULT_DOWNLOAD_POLICY, allowedCidrs: ['127.0.0.0/8'] };

/** Serves files by path in 16 writes (so progress crosses each 10%), counting requests per path. */
async function serveImages(
  t: Test,
  files: Record<string, Buffer>,
): Promise<{ url: (path: string) => string; requests: Map<string, number> }> {
  const requests = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    requests.set(path, (requests.get(path) ?? 0) + 1);
    if (path === '/truncated') {
      res.writeHead(200, { 'content-length': MiB });
      res.write(Buffer.alloc(MiB / 4));
      setImmediate(() => res.destroy());
      return;
    }
    const body = files[path];
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-length': body.length });
    const step = Math.ceil(body.length / 16);
    for (let off = 0; off < body.length; off += step) res.write(body.subarray(off, off + step));
    res.end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  return { url: (path) => `http://127.0.0.1:${port}${path}`, requests };
}

async function qcow2Image(dir: string, extraArgs: string[] = []): Promise<Buffer> {
  const path = join(dir, `img-${Math.random().toString(16).slice(2)}.qcow2`);
  await run('qemu-img', ['create', '-f', 'qcow2', ...extraArgs, path, '32M']);
  return readFile(path);
}

const urlDisk = (url: string): DiskSpec => ({ name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'url', url } });

t.test('two VMs asking for one URL at once share one download, and each gets its own overlay', async (t) => {
  const root = t.testdir({ src: {} });
  const image = await qcow2Image(join(root, 'src'));
  const server = await serveImages(t, { '/debian.qcow2': image });
  const url = server.url('/debian.qcow2?token=secret');
  const cacheDir = join(root, 'cache');
  const { log, entries } = recordingLog();
  const [vm1, vm2] = await Promise.all(
    ['vm1', 'vm2'].map((vm) =>
      prepareDisks(
        testSpec({ disks: [urlDisk(url)] }),
        { vmDir: join(root, vm), cacheDir, downloads: LOOPBACK_DOWNLOADS, owner: TEST_QEMU_OWNER },
        log,
      ),
    ),
  );
  const cached = imageCachePath(cacheDir, url);
  t.match(
    {
      requests: server.requests.get('/debian.qcow2'),
      cache: await readdir(cacheDir),
      cachedBytesEqual: (await readFile(cached)).equals(image),
      vm1: await readImageInfo(vm1!.root!.path),
      vm2: await readImageInfo(vm2!.root!.path),
    },
    {
      requests: 1,
      cache: [cached.slice(cacheDir.length + 1)],
      cachedBytesEqual: true,
      vm1: { format: 'qcow2', backingFile: cached },
      vm2: { format: 'qcow2', backingFile: cached },
    },
  );
  t.notMatch(JSON.stringify(entries), /secret/, 'the URL query never reaches the logs');

  await prepareDisks(
    testSpec({ disks: [urlDisk(url)] }),
    { vmDir: join(root, 'vm3'), cacheDir, downloads: LOOPBACK_DOWNLOADS, owner: TEST_QEMU_OWNER },
    log,
  );
  t.equal(server.requests.get('/debian.qcow2'), 1, 'a later VM uses the cache');
});

t.test('progress is logged about every 10% of a download of known size', async (t) => {
  const root = t.testdir();
  const server = await serveImages(t, { '/disk.raw': Buffer.alloc(MiB) });
  const { log, entries } = recordingLog();
  await prepareDisks(
    testSpec({ disks: [urlDisk(server.url('/disk.raw'))] }),
    { vmDir: join(root, 'vm'), cacheDir: join(root, 'cache'), downloads: LOOPBACK_DOWNLOADS, owner: TEST_QEMU_OWNER },
    log,
  );
  const percents = entries.filter((e) => e.msg === 'downloading image').map((e) => e.percent as number);
  t.ok(percents.length >= 5 && percents.length <= 10, `5 to 10 progress lines, got ${percents.join(', ')}`);
  const deciles = percents.map((p) => Math.floor(p / 10));
  t.ok(
    deciles.every((d, i) => i === 0 || d > (deciles[i - 1] ?? 0)),
    `at most one line per 10%, got ${percents.join(', ')}`,
  );
  t.equal(percents.at(-1), 100);
});

t.test('a URL the server does not have is a SpecError, and nothing is left on disk', async (t) => {
  const root = t.testdir();
  const server = await serveImages(t, {});
  const { log } = recordingLog();
  const err = await rejection(
    prepareDisks(
      testSpec({ disks: [urlDisk(server.url('/missing.qcow2'))] }),
      { vmDir: join(root, 'vm'), cacheDir: join(root, 'cache'), downloads: LOOPBACK_DOWNLOADS, owner: TEST_QEMU_OWNER },
      log,
    ),
  );
  t.match(err, { kind: 'SpecError', causes: [{ path: 'disks[0].source.url', reason: 'FieldValueNotFound', message: /404/ }] });
  t.same(await readdir(root, { recursive: true }), ['cache'], 'only the (empty) shared cache directory remains');
});

t.test('a truncated download is a retryable DownloadError and leaves no partial file', async (t) => {
  const root = t.testdir();
  const server = await serveImages(t, {});
  const { log } = recordingLog();
  const err = await rejection(
    prepareDisks(
      testSpec({ disks: [urlDisk(server.url('/truncated'))] }),
      { vmDir: join(root, 'vm'), cacheDir: join(root, 'cache'), downloads: LOOPBACK_DOWNLOADS, owner: TEST_QEMU_OWNER },
      log,
    ),
  );
  t.match(err, { kind: 'DownloadError', url: server.url('/truncated') });
  t.same(await readdir(root, { recursive: true }), ['cache']);
});

t.test('a downloaded image that names a backing file on the host is refused', async (t) => {
  const root = t.testdir({ src: {} });
  const evil = await qcow2Image(join(root, 'src'), ['-F', 'raw', '-b', '/etc/hostname']);
  const server = await serveImages(t, { '/evil.qcow2': evil });
  const { log } = recordingLog();
  const err = await rejection(
    prepareDisks(
      testSpec({ disks: [urlDisk(server.url('/evil.qcow2'))] }),
      { vmDir: join(root, 'vm'), cacheDir: join(root, 'cache'), downloads: LOOPBACK_DOWNLOADS, owner: TEST_QEMU_OWNER },
      log,
    ),
  );
  t.match(err, {
    kind: 'SpecError',
    causes: [{ path: 'disks[0].source.url', reason: 'FieldValueInvalid', message: /backing or data file/ }],
  });
  t.same((await readdir(root)).sort(), ['cache', 'src'], 'no VM directory is left');
});

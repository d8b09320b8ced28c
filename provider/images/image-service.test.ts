import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { startBlobStorage, startFakeRegistry, type FakeAuth, type FakeRegistry } from '../../test/helpers/fake-registry.js';
import { buildImage, buildIndex, imageBlobs, tarLayer, type TestImage } from '../../test/helpers/oci.js';
import { ImageService, type PullRequest } from './image-service.js';
import { DockerKeyring } from './keyring.js';
import { plainHttpAllowed } from './registry-client.js';
import { ImageStore } from './store.js';

const log = pino({ level: 'silent' });

function diskImage(content = 'raw disk bytes', opts: { docker?: boolean; architecture?: string } = {}): TestImage {
  return buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content }]) }], opts);
}

async function setup(t: Test, auth: FakeAuth = { kind: 'none' }, opts: { maxImageBytes?: number } = {}) {
  const registry = await startFakeRegistry(t, auth);
  const scratch = t.testdir();
  const store = new ImageStore(join(scratch, 'images'));
  await store.init();
  const images = new ImageService({ store, maxParallelPulls: 2, maxImageBytes: opts.maxImageBytes ?? 1 << 30, log });
  t.teardown(() => images.close());
  const ensure = (image: string, over: Partial<PullRequest> = {}) =>
    images.ensure({ image: `${registry.host}/${image}`, policy: 'IfNotPresent', ...over });
  return { registry, store, images, ensure, scratch };
}

const gets = (r: FakeRegistry, what: 'manifests' | 'blobs') =>
  r.requests.filter((q) => q.line.startsWith('GET') && q.line.includes(`/${what}/`)).map((q) => q.line);
const keyring = (host: string, ...creds: Array<[string, string]>) => {
  const k = new DockerKeyring();
  creds.forEach(([username, password], i) => k.add(host, { username, password, from: `ns/secret-${i}` }));
  return k;
};

t.test('an index: the linux/amd64 image is pulled, attestations skipped, imageID is the digest the tag resolved to', async (t) => {
  const { registry, store, images, ensure } = await setup(t);
  const amd64 = diskImage('amd64 disk');
  const arm64 = diskImage('arm64 disk', { architecture: 'arm64' });
  const attestation = buildImage([{ tar: tarLayer([{ path: 'attestation.json', content: '{}' }]) }]);
  const index = buildIndex(
    [
      { image: arm64, architecture: 'arm64' },
      { image: amd64, architecture: 'amd64' },
    ],
    { attestation },
  );
  registry.addIndex('vms/fedora', 'v1', index, [amd64, arm64, attestation]);

  const ready = await ensure('vms/fedora:v1');
  t.match(ready, {
    reference: `${registry.host}/vms/fedora:v1`,
    digest: index.digest,
    manifestDigest: amd64.manifest.digest,
    imageID: `${registry.host}/vms/fedora@${index.digest}`,
    pulled: true,
  });
  t.same(
    gets(registry, 'blobs').sort(),
    imageBlobs(amd64)
      .map((b) => `GET /v2/vms/fedora/blobs/${b.digest}`)
      .sort(),
    "only amd64's blobs are fetched",
  );
  const [disk] = await images.files(ready, [{ onlyIn: '/disk' }], { disk: true });
  t.equal(readFileSync(disk!, 'utf8'), 'amd64 disk');
  t.equal(statSync(disk!).mode & 0o777, 0o444, 'the disk is read-only for everyone');
  t.same(
    await store.record(`${registry.host}/vms/fedora@${index.digest}`).then((r) => r?.manifestDigest),
    amd64.manifest.digest,
    'present by digest too',
  );

  const byDigest = await ensure(`vms/fedora@${amd64.manifest.digest}`, { policy: 'Always' });
  t.match(
    byDigest,
    { digest: amd64.manifest.digest, manifestDigest: amd64.manifest.digest, pulled: true },
    'a pull by the platform manifest digest',
  );
});

t.test('Docker schema 2 manifest lists and manifests are read too', async (t) => {
  const { registry, ensure } = await setup(t);
  const amd64 = diskImage('docker disk', { docker: true });
  registry.addIndex('docker/list', 'latest', buildIndex([{ image: amd64, architecture: 'amd64' }], { docker: true }), [amd64]);
  t.match(await ensure('docker/list'), { manifestDigest: amd64.manifest.digest });
  t.same(registry.requests.filter((r) => r.line.includes('/manifests/')).length, 2, 'the list, then its amd64 manifest');
});

t.test('pull policies: Never and IfNotPresent use the store without asking the registry; Always re-resolves', async (t) => {
  const { registry, ensure } = await setup(t);
  const image = diskImage();
  registry.addImage('app', 'v1', image);
  await t.rejects(ensure('app:v1', { policy: 'Never' }), {
    reason: 'ErrImageNeverPull',
    message: `Container image "${registry.host}/app:v1" is not present with pull policy of Never`,
  });
  t.same(registry.requests, [], 'Never never asks');
  let pulling = 0;
  t.match(await ensure('app:v1', { onPulling: () => pulling++ }), { pulled: true });
  const seen = registry.requests.length;
  t.match(await ensure('app:v1', { onPulling: () => pulling++ }), { pulled: false });
  t.match(await ensure('app:v1', { policy: 'Never' }), { pulled: false });
  t.equal(registry.requests.length, seen, 'IfNotPresent and Never: no request once present');
  t.match(await ensure('app:v1', { policy: 'Always', onPulling: () => pulling++ }), { pulled: true });
  t.same(
    registry.requests.slice(seen).map((r) => r.line),
    [`GET /v2/app/manifests/v1`],
    'Always: the manifest again, no blob it has',
  );
  t.equal(pulling, 2, 'onPulling only when the registry is asked');
});

t.test('many pulls of one new image at once: one download of each blob', async (t) => {
  const { registry, images, ensure } = await setup(t);
  const image = buildImage([
    { tar: tarLayer([{ path: 'disk/disk.img', content: 'x'.repeat(1 << 20) }]) },
    { tar: tarLayer([{ path: 'etc/motd', content: 'hi' }]) },
  ]);
  registry.addImage('shared', 'v1', image);
  const held = registry.holdBlobs();
  const pulls = Array.from({ length: 10 }, (_, i) => ensure('shared:v1', { policy: i % 2 ? 'Always' : 'IfNotPresent' }));
  setTimeout(held.release, 50);
  const ready = await Promise.all(pulls);
  t.same(new Set(ready.map((r) => r.digest)).size, 1);
  t.same(
    gets(registry, 'blobs').sort(),
    imageBlobs(image)
      .map((b) => `GET /v2/shared/blobs/${b.digest}`)
      .sort(),
    'each blob fetched once',
  );
  const files = await Promise.all(ready.map((r) => images.files(r, [{ onlyIn: '/disk' }], { disk: true })));
  t.same(new Set(files.flat()).size, 1, 'one extracted disk shared by all');
});

t.test('a corrupted blob or a lying digest is refused and nothing is kept', async (t) => {
  const { registry, store, ensure } = await setup(t);
  const image = diskImage();
  registry.addImage('bad', 'v1', image);
  registry.corrupt(image.layers[0]!.digest);
  await t.rejects(ensure('bad:v1'), {
    reason: 'ErrImagePull',
    message: new RegExp(`blob ${image.layers[0]!.digest} does not match its digest`),
  });
  t.same(await store.records(), [], 'no reference recorded');
  t.same((await store.blobDigests()).includes(image.layers[0]!.digest), false, 'the corrupted blob is not stored');
  t.same(readdirSync(join(store.root, 'ingest')), [], 'no partial file left');

  const other = diskImage('other');
  registry.addImage('liar', 'v1', other);
  registry.lieAboutDigests(image.manifest.digest);
  await t.rejects(ensure('liar:v1'), { message: /the manifest's digest is sha256:\w+, not the sha256:\w+ the registry claims/ });
  registry.addManifest('liar', image.manifest.digest, other.manifest.mediaType, other.manifest.data);
  await t.rejects(ensure(`liar@${image.manifest.digest}`), { message: /the registry sent a manifest with digest/ });
});

t.test('manifests vkvm does not read are refused, saying why', async (t) => {
  const { registry, ensure } = await setup(t);
  registry.addManifest(
    'old',
    'v1',
    'application/vnd.docker.distribution.manifest.v1+prettyjws',
    Buffer.from(JSON.stringify({ schemaVersion: 1, name: 'old', fsLayers: [] })),
  );
  await t.rejects(ensure('old:v1'), { reason: 'ErrImagePull', message: /Docker schema1 manifest, which vkvm does not read/ });
  registry.addManifest('huge', 'v1', 'application/vnd.oci.image.manifest.v1+json', Buffer.alloc(5 * 2 ** 20, 0x20));
  await t.rejects(ensure('huge:v1'), { message: /more than the 4194304 vkvm reads/ });
  const arm = diskImage('arm', { architecture: 'arm64' });
  registry.addIndex('armonly', 'v1', buildIndex([{ image: arm, architecture: 'arm64' }]), [arm]);
  await t.rejects(ensure('armonly:v1'), { message: /no linux\/amd64 image in the index \(it has: linux\/arm64\)/ });
  await t.rejects(ensure('missing:v1'), {
    message: /not found: manifest v1 of 127\.0\.0\.1:\d+\/missing not found \(MANIFEST_UNKNOWN: manifest unknown\)/,
  });
  await t.rejects(ensure('Bad:Name'), { name: 'ImagePullError', reason: 'InvalidImageName' });
});

t.test('the disk must be qcow2 without a backing file, or raw', async (t) => {
  const { registry, images, ensure, scratch: dir } = await setup(t);
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', '-F', 'raw', '-b', '/etc/hostname', join(dir, 'backed.qcow2')]);
  registry.addImage(
    'backed',
    'v1',
    buildImage([{ tar: tarLayer([{ path: 'disk/disk.qcow2', content: readFileSync(join(dir, 'backed.qcow2')) }]) }]),
  );
  const ready = await ensure('backed:v1');
  await t.rejects(images.files(ready, [{ onlyIn: '/disk' }], { disk: true }), {
    reason: 'ErrImagePull',
    message: /\/disk\/disk\.qcow2: a base image must not refer to other files/,
  });
  registry.addImage(
    'two',
    'v1',
    buildImage([
      {
        tar: tarLayer([
          { path: 'disk/a.img', content: 'a' },
          { path: 'disk/b.img', content: 'b' },
        ]),
      },
    ]),
  );
  await t.rejects(images.files(await ensure('two:v1'), [{ onlyIn: '/disk' }], { disk: true }), {
    message: new RegExp(`^Failed to pull image "${registry.host}/two:v1": the image has more than one entry under /disk`),
  });
});

t.test('authentication: anonymous bearer tokens, Basic, each matching credential in turn', async (t) => {
  await t.test('anonymous bearer token', async (t) => {
    const { registry, ensure } = await setup(t, { kind: 'bearer' });
    registry.addImage('public', 'v1', diskImage());
    await ensure('public:v1');
    t.match(
      registry.requests.find((r) => r.line === 'GET /token'),
      { authorization: '-' },
      'the token is asked for without credentials',
    );
    t.ok(gets(registry, 'blobs').length > 0);
  });
  await t.test('bearer token with credentials', async (t) => {
    const { registry, ensure } = await setup(t, { kind: 'bearer', user: 'alice', password: 'pw' });
    registry.addImage('private', 'v1', diskImage());
    await t.rejects(ensure('private:v1'), { message: /unauthorized: the token service of 127\.0\.0\.1:\d+ refused an anonymous token/ });
    t.match(await ensure('private:v1', { keyring: keyring(registry.host, ['alice', 'pw']) }), { pulled: true });
  });
  await t.test('Basic: no secret, a wrong password, then the second of two credentials', async (t) => {
    const { registry, ensure } = await setup(t, { kind: 'basic', user: 'alice', password: 'pw' });
    registry.addImage('private', 'v1', diskImage());
    await t.rejects(ensure('private:v1'), {
      reason: 'ErrImagePull',
      message: /unauthorized: 127\.0\.0\.1:\d+ requires authentication and no pull secret matched it/,
    });
    await t.rejects(ensure('private:v1', { keyring: keyring(registry.host, ['alice', 'wrong']) }), {
      message: /unauthorized: 127\.0\.0\.1:\d+ refused the credentials from pull secret ns\/secret-0 for 127\.0\.0\.1:\d+\/private/,
    });
    t.match(await ensure('private:v1', { keyring: keyring(registry.host, ['alice', 'wrong'], ['alice', 'pw']) }), { pulled: true });
  });
});

t.test('blobs redirected to another origin get no credentials', async (t) => {
  const { registry, ensure } = await setup(t, { kind: 'basic', user: 'alice', password: 'pw' });
  const image = diskImage();
  registry.addImage('private', 'v1', image);
  const storage = await startBlobStorage(t, imageBlobs(image));
  registry.redirectBlobsTo(storage.base);
  await ensure('private:v1', { keyring: keyring(registry.host, ['alice', 'pw']) });
  t.same(storage.seen, ['-', '-'], 'both blobs fetched from the storage without Authorization');
});

t.test('an unreachable registry, and plain HTTP only for loopback or listed registries', async (t) => {
  const { images } = await setup(t);
  await t.rejects(images.ensure({ image: '127.0.0.1:1/app:v1', policy: 'IfNotPresent' }), {
    reason: 'ErrImagePull',
    message: /unreachable: 127\.0\.0\.1:1: ECONNREFUSED/,
  });
  t.same(
    [
      '127.0.0.1:5000',
      '127.9.9.9',
      '[::1]:5000',
      'localhost:5000',
      'registry.local:5000',
      'registry.local',
      '10.0.0.1:5000',
      'quay.io',
    ].map((h) => plainHttpAllowed(h, ['registry.local:5000'])),
    [true, true, true, true, true, false, false, false],
  );
});

t.test('images larger than the node accepts are refused before downloading', async (t) => {
  const { registry, ensure } = await setup(t, { kind: 'none' }, { maxImageBytes: 100 });
  registry.addImage('big', 'v1', diskImage('x'.repeat(4096)));
  await t.rejects(ensure('big:v1'), { message: /more than the 100 this node accepts/ });
  t.same(gets(registry, 'blobs'), []);
});

import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t from 'tap';
import { LOOPBACK_PULLS } from '../../test/helpers/fake-registry.js';
import { buildImage, buildIndex, tarLayer, writeTestImagesToLayout } from '../../test/helpers/oci.js';
import { ImageService } from './image-service.js';
import { importLayout } from './oci-layout.js';
import { pruneStore, removeImage } from './remove.js';
import { ImageStore } from './store.js';

const MAX = 1 << 30;

t.test('an OCI layout, as a directory or a compressed tar, is imported under its names and used without a registry', async (t) => {
  const dir = t.testdir();
  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  const disk = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'imported disk' }]) }]);
  const arm = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'arm' }]) }], { architecture: 'arm64' });
  const kernel = buildImage([{ tar: tarLayer([{ path: 'boot/vmlinuz', content: 'k' }]) }]);
  const layout = join(dir, 'layout');
  writeTestImagesToLayout(layout, [
    {
      image: disk,
      index: buildIndex([
        { image: arm, architecture: 'arm64' },
        { image: disk, architecture: 'amd64' },
      ]),
      extra: [arm],
      annotations: { 'io.containerd.image.name': 'localhost/vkvm/disk:v1' },
    },
    { image: kernel, annotations: { 'org.opencontainers.image.ref.name': 'localhost/vkvm/kernel:v1' } },
  ]);
  const imported = await importLayout(layout, store, { maxImageBytes: MAX });
  t.same(
    imported.map((r) => [r.reference, r.manifestDigest]),
    [
      ['localhost/vkvm/disk:v1', disk.manifest.digest],
      ['localhost/vkvm/kernel:v1', kernel.manifest.digest],
    ],
  );
  const images = new ImageService({ store, ...LOOPBACK_PULLS, maxParallelPulls: 1, maxImageBytes: MAX, log: pino({ level: 'silent' }) });
  t.teardown(() => images.close());
  const ready = await images.ensure({ image: 'localhost/vkvm/disk:v1', policy: 'Never' });
  t.equal(
    readFileSync((await images.files(ready, [{ onlyIn: '/disk' }], { disk: true }))[0]!, 'utf8'),
    'imported disk',
    'Never: used from the store',
  );

  const archive = join(dir, 'layout.tar.zst');
  const tagOnly = join(dir, 'tagonly');
  writeTestImagesToLayout(tagOnly, [{ image: disk, annotations: { 'org.opencontainers.image.ref.name': 'latest' } }]);
  execFileSync('sh', ['-c', `tar -C ${tagOnly} -cf - . | zstd -q -o ${archive}`]);
  await t.rejects(importLayout(archive, store, { maxImageBytes: MAX }), {
    message: /has no full reference as its name; give one with --name/,
  });
  t.match(await importLayout(archive, store, { name: 'localhost/vkvm/test-guest', maxImageBytes: MAX }), [
    { reference: 'localhost/vkvm/test-guest:latest' },
  ]);

  rmSync(join(tagOnly, 'blobs', 'sha256', disk.layers[0]!.digest.slice(7)));
  writeFileSync(join(tagOnly, 'blobs', 'sha256', disk.layers[0]!.digest.slice(7)), 'tampered');
  const fresh = new ImageStore(join(dir, 'fresh'));
  await fresh.init();
  await t.rejects(importLayout(tagOnly, fresh, { name: 'localhost/x', maxImageBytes: MAX }), {
    message: /larger than the \d+ bytes|is \d+ bytes, not the|does not match its digest/,
  });
  t.same(await fresh.records(), [], 'a tampered layout imports nothing');
});

t.test('rm removes names, then prune the content no name leads to', async (t) => {
  const dir = t.testdir();
  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  const a = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'a' }]) }]);
  const b = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'b' }]) }]);
  const layout = join(dir, 'layout');
  writeTestImagesToLayout(layout, [
    { image: a, annotations: { 'io.containerd.image.name': 'localhost/a:v1' } },
    { image: b, annotations: { 'io.containerd.image.name': 'localhost/b:v1' } },
  ]);
  await importLayout(layout, store, { maxImageBytes: MAX });
  t.same(
    (await store.records()).map((r) => r.reference),
    ['localhost/a:v1', `localhost/a@${a.manifest.digest}`, 'localhost/b:v1', `localhost/b@${b.manifest.digest}`],
  );
  t.same(
    await removeImage(store, 'localhost/a:v1'),
    ['localhost/a:v1', `localhost/a@${a.manifest.digest}`],
    'the last tag takes the digest name with it',
  );
  t.same(await pruneStore(store, { minAgeMs: 60_000 }), { blobs: 0, bytes: 0 }, 'fresh blobs stay (a pull may be writing them)');
  const pruned = await pruneStore(store, { minAgeMs: 0 });
  t.equal(pruned.blobs, 3, "a's manifest, config and layer");
  t.same((await store.blobDigests()).sort(), [b.manifest.digest, b.config.digest, b.layers[0]!.digest].sort(), "b's blobs stay");
  t.same(await removeImage(store, 'localhost/nothing:v1'), []);
});

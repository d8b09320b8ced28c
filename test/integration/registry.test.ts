// The pull library against a real registry (Debian's docker-registry,
// distribution 2.8) with images pushed by the test: an OCI index with an
// attestation entry, a Docker manifest list, a zstd layer, htpasswd auth.
// No cluster: the e2e test (test/e2e/images.test.ts) runs pods on top.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { ImageService } from '../../provider/images/image-service.js';
import { DockerKeyring } from '../../provider/images/keyring.js';
import { ImageStore } from '../../provider/images/store.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { buildImage, buildIndex, pushImage, tarLayer } from '../helpers/oci.js';

const log = pino({ level: 'silent' });

async function service(t: Test, dir: string) {
  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  const images = new ImageService({ store, maxParallelPulls: 3, maxImageBytes: 1 << 30, log });
  t.teardown(() => images.close());
  return images;
}

t.test('images pushed to docker-registry are pulled by tag and digest, index or not', async (t) => {
  const dir = t.testdir();
  const registry = await startDockerRegistry(t, { dir });
  const images = await service(t, dir);
  const amd64 = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'oci amd64' }]) }]);
  const arm64 = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'oci arm64' }]) }], { architecture: 'arm64' });
  const attestation = buildImage([{ tar: tarLayer([{ path: 'sbom.json', content: '{}' }]) }]);
  const index = buildIndex([{ image: arm64, architecture: 'arm64' }, { image: amd64, architecture: 'amd64' }], { attestation });
  await pushImage(registry.base, 'multi/disk', 'v1', [arm64, amd64, attestation], { index });
  const dockerImage = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'docker' }]) }], { docker: true });
  await pushImage(registry.base, 'docker/disk', 'v1', [dockerImage], { index: buildIndex([{ image: dockerImage, architecture: 'amd64' }], { docker: true }) });
  const zstd = buildImage([{ tar: tarLayer([{ path: 'boot/vmlinuz', content: 'kernel' }]), compression: 'zstd' }, { tar: tarLayer([{ path: 'boot/initrd.img', content: 'initrd' }]), compression: 'none' }]);
  await pushImage(registry.base, 'kernel/boot', 'v1', [zstd]);

  const byTag = await images.ensure({ image: `${registry.host}/multi/disk:v1`, policy: 'IfNotPresent' });
  t.match(byTag, { digest: index.digest, manifestDigest: amd64.manifest.digest, imageID: `${registry.host}/multi/disk@${index.digest}`, pulled: true });
  t.equal(readFileSync((await images.files(byTag, [{ onlyIn: '/disk' }], { disk: true }))[0]!, 'utf8'), 'oci amd64');
  const byDigest = await images.ensure({ image: `${registry.host}/multi/disk@${amd64.manifest.digest}`, policy: 'Always' });
  t.match(byDigest, { digest: amd64.manifest.digest, pulled: true });

  const docker = await images.ensure({ image: `${registry.host}/docker/disk:v1`, policy: 'IfNotPresent' });
  t.equal(readFileSync((await images.files(docker, [{ onlyIn: '/disk' }], { disk: true }))[0]!, 'utf8'), 'docker', 'a Docker manifest list');

  const kernel = await images.ensure({ image: `${registry.host}/kernel/boot:v1`, policy: 'IfNotPresent' });
  const files = await images.files(kernel, [{ path: '/boot/vmlinuz' }, { path: '/boot/initrd.img' }], { disk: false });
  t.same(
    files.map((f) => readFileSync(f, 'utf8')),
    ['kernel', 'initrd'],
    'a zstd layer and an uncompressed one',
  );

  const mark = registry.log.length;
  await images.ensure({ image: `${registry.host}/multi/disk:v1`, policy: 'IfNotPresent' });
  t.same(registry.requestsSince(mark), [], 'IfNotPresent: the registry is not asked once the image is present');
});

t.test('htpasswd auth: no secret, a wrong password, the right one', async (t) => {
  const dir = t.testdir();
  const registry = await startDockerRegistry(t, { dir, auth: { user: 'alice', password: 's3cret' } });
  const images = await service(t, dir);
  await pushImage(registry.base, 'private/disk', 'v1', [buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'private' }]) }])], { auth: 'alice:s3cret' });
  const keyring = (password: string) => {
    const k = new DockerKeyring();
    k.add(registry.host, { username: 'alice', password, from: 'ns/pull' });
    return k;
  };
  const image = `${registry.host}/private/disk:v1`;
  await t.rejects(images.ensure({ image, policy: 'IfNotPresent' }), { reason: 'ErrImagePull', message: /unauthorized: 127\.0\.0\.1:\d+ requires authentication and no pull secret matched it/ });
  await t.rejects(images.ensure({ image, policy: 'IfNotPresent', keyring: keyring('wrong') }), { reason: 'ErrImagePull', message: /unauthorized: .*refused the credentials from pull secret ns\/pull/ });
  t.match(await images.ensure({ image, policy: 'IfNotPresent', keyring: keyring('s3cret') }), { pulled: true });
});

// The pull library against a real registry (Debian's docker-registry,
// distribution 2.8) with images pushed by the test: an OCI index with an
// attestation entry, a Docker manifest list, a zstd layer, htpasswd auth.
// No cluster: the e2e test (test/e2e/images.test.ts) runs pods on top.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { ImageService } from '../../provider/images/image-service.js';
import { packageRoot } from '../../provider/package-root.js';
import { DockerKeyring } from '../../provider/images/keyring.js';
import { ImageStore } from '../../provider/images/store.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { LOOPBACK_PULLS } from '../helpers/fake-registry.js';
import { buildImage, buildIndex, pushImage, tarLayer } from '../helpers/oci.js';

const log = pino({ level: 'silent' });
const CLI = join(packageRoot(), 'dist', 'provider', 'cli', 'main.js');

async function service(t: Test, dir: string) {
  const store = new ImageStore(join(dir, 'store'));
  await store.init();
  const images = new ImageService({ store, ...LOOPBACK_PULLS, maxParallelPulls: 3, maxImageBytes: 1 << 30, log });
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
  const index = buildIndex(
    [
      { image: arm64, architecture: 'arm64' },
      { image: amd64, architecture: 'amd64' },
    ],
    { attestation },
  );
  await pushImage(registry.base, 'multi/disk', 'v1', [arm64, amd64, attestation], { index });
  const dockerImage = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'docker' }]) }], { docker: true });
  await pushImage(registry.base, 'docker/disk', 'v1', [dockerImage], {
    index: buildIndex([{ image: dockerImage, architecture: 'amd64' }], { docker: true }),
  });
  const zstd = buildImage([
    { tar: tarLayer([{ path: 'boot/vmlinuz', content: 'kernel' }]), compression: 'zstd' },
    { tar: tarLayer([{ path: 'boot/initrd.img', content: 'initrd' }]), compression: 'none' },
  ]);
  await pushImage(registry.base, 'kernel/boot', 'v1', [zstd]);

  const byTag = await images.ensure({ image: `${registry.host}/multi/disk:v1`, policy: 'IfNotPresent' });
  t.match(byTag, {
    digest: index.digest,
    manifestDigest: amd64.manifest.digest,
    imageID: `${registry.host}/multi/disk@${index.digest}`,
    pulled: true,
  });
  t.equal(readFileSync((await images.files(byTag, [{ onlyIn: '/disk' }], { disk: true }))[0]!, 'utf8'), 'oci amd64');
  const byDigest = await images.ensure({ image: `${registry.host}/multi/disk@${amd64.manifest.digest}`, policy: 'Always' });
  t.match(byDigest, { digest: amd64.manifest.digest, pulled: true });

  const docker = await images.ensure({ image: `${registry.host}/docker/disk:v1`, policy: 'IfNotPresent' });
  t.equal(
    readFileSync((await images.files(docker, [{ onlyIn: '/disk' }], { disk: true }))[0]!, 'utf8'),
    'docker',
    'a Docker manifest list',
  );

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
  await pushImage(registry.base, 'private/disk', 'v1', [buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'private' }]) }])], {
    auth: 'alice:s3cret',
  });
  const keyring = (password: string) => {
    const k = new DockerKeyring();
    k.add(registry.host, { username: 'alice', password, from: 'ns/pull' });
    return k;
  };
  const image = `${registry.host}/private/disk:v1`;
  await t.rejects(images.ensure({ image, policy: 'IfNotPresent' }), {
    reason: 'ErrImagePull',
    message: /unauthorized: 127\.0\.0\.1:\d+ requires authentication and no pull secret matched it/,
  });
  await t.rejects(images.ensure({ image, policy: 'IfNotPresent', keyring: keyring('wrong') }), {
    reason: 'ErrImagePull',
    message: /unauthorized: .*refused the credentials from pull secret ns\/pull/,
  });
  t.match(await images.ensure({ image, policy: 'IfNotPresent', keyring: keyring('s3cret') }), { pulled: true });
});

t.test('vkvm images: pull with credentials, ls, an OCI layout skopeo wrote imported, rm', async (t) => {
  const dir = t.testdir();
  const registry = await startDockerRegistry(t, { dir, auth: { user: 'alice', password: 's3cret' } });
  const image = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'cli' }]) }]);
  await pushImage(registry.base, 'cli/disk', 'v1', [image], { auth: 'alice:s3cret' });
  const store = join(dir, 'store');
  const vkvm = (...args: string[]) =>
    spawnSync(process.execPath, [CLI, 'images', ...args, `--image-store-dir=${store}`], { encoding: 'utf8' });

  const denied = vkvm('pull', `${registry.host}/cli/disk:v1`);
  t.match(
    { status: denied.status, stderr: denied.stderr },
    { status: 1, stderr: /Failed to pull image .*unauthorized/ },
    'no credentials: unauthorized',
  );
  const pulled = vkvm('pull', `${registry.host}/cli/disk:v1`, '--creds', 'alice:s3cret');
  t.match(
    { status: pulled.status, stdout: pulled.stdout },
    { status: 0, stdout: `${registry.host}/cli/disk@${image.manifest.digest}\n` },
    'pull prints the imageID',
  );

  // skopeo writes the layout an offline node would be handed.
  const layout = join(dir, 'layout');
  const copied = spawnSync(
    'skopeo',
    [
      'copy',
      '--quiet',
      '--src-tls-verify=false',
      '--src-creds',
      'alice:s3cret',
      `docker://${registry.host}/cli/disk:v1`,
      `oci:${layout}:v1`,
    ],
    { encoding: 'utf8' },
  );
  t.equal(copied.status, 0, copied.stderr);
  const imported = vkvm('import', layout, '--name', 'localhost/vkvm/cli-disk:v1');
  t.match(
    { status: imported.status, stdout: imported.stdout },
    { status: 0, stdout: /^imported localhost\/vkvm\/cli-disk:v1 \(sha256:[a-f0-9]{64}\)\n$/ },
  );

  const ls = vkvm('ls');
  t.match(
    ls.stdout.split('\n'),
    [
      /^IMAGE\s+DIGEST\s+SIZE\s+PINNED\s+PULLED$/,
      /^127\.0\.0\.1:\d+\/cli\/disk:v1\s+sha256:[a-f0-9]{12}\s+\d/,
      /^127\.0\.0\.1:\d+\/cli\/disk@sha256/,
      /^localhost\/vkvm\/cli-disk:v1\s+sha256:[a-f0-9]{12}\s+\S+\s+false\s/,
      /^localhost\/vkvm\/cli-disk@sha256/,
      '',
    ],
    'ls lists every name',
  );
  const rm = vkvm('rm', 'localhost/vkvm/cli-disk:v1', 'localhost/nothing');
  t.match(
    { status: rm.status, stdout: rm.stdout, stderr: rm.stderr },
    {
      status: 1,
      stdout: /^deleted localhost\/vkvm\/cli-disk:v1\ndeleted localhost\/vkvm\/cli-disk@sha256:/,
      stderr: 'vkvm: no image localhost/nothing in the store\n',
    },
  );
  t.equal(vkvm('ls').stdout.split('\n').length, 4, 'the pulled image stays');
});

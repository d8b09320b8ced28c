// Registry requests under the node's address policy, as image URLs are: a
// registry on the node is reached only when the operator lists it, and then
// only that registry; every redirect is checked again (blob downloads are
// redirected to storage backends), and what is refused never hears a byte.
import { join } from 'node:path';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { startFakeRegistry, type FakeRegistry } from '../../test/helpers/fake-registry.js';
import { buildImage, tarLayer } from '../../test/helpers/oci.js';
import { DEFAULT_DOWNLOAD_POLICY } from '../../vmm/disks/download-policy.js';
import { ImageService } from './image-service.js';
import { ImageStore } from './store.js';

/** The agent's rules: the service range refused besides the built-in ranges; loopback only for listed registries. */
const POLICY = { ...DEFAULT_DOWNLOAD_POLICY, deniedCidrs: ['10.96.0.0/12'] };

async function service(t: Test, localRegistries: string[]) {
  const store = new ImageStore(join(t.testdir(), 'images'));
  await store.init();
  const images = new ImageService({
    store,
    addresses: POLICY,
    localRegistries,
    verifyPullCredentials: true,
    maxParallelPulls: 2,
    maxImageBytes: 1 << 30,
    idleTimeoutMs: 5000,
    log: pino({ level: 'silent' }),
  });
  t.teardown(() => images.close());
  return { store, images, pull: (image: string) => images.ensure({ image, policy: 'Always' }) };
}

async function registryWith(t: Test, repo: string) {
  const registry = await startFakeRegistry(t);
  registry.addImage(repo, 'v1', buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: `${repo} disk` }]) }]));
  return { registry };
}

const seen = (r: FakeRegistry) => r.requests.map((q) => q.line);

t.test('a registry on the node is refused unless the operator lists it, and the registry hears nothing', async (t) => {
  const { registry } = await registryWith(t, 'disk');
  const port = registry.host.split(':')[1];
  const { pull } = await service(t, []);
  await t.rejects(pull(`${registry.host}/disk:v1`), {
    reason: 'ErrImagePull',
    message: new RegExp(
      `^Failed to pull image "${registry.host}/disk:v1": refused: ${registry.host}: 127\\.0\\.0\\.1 is the node's loopback; registries may not be on the node`,
    ),
  });
  await t.rejects(pull(`localhost:${port}/disk:v1`), { message: /refused: localhost:\d+: localhost: 127\.0\.0\.1 is the node's loopback/ });
  t.same(seen(registry), [], 'no request reached it');

  const listed = await service(t, [registry.host]);
  t.match(await listed.pull(`${registry.host}/disk:v1`), { pulled: true }, 'listed, it is pulled from');
});

t.test('link-local and the service range are refused, listed or not', async (t) => {
  const { pull } = await service(t, ['169.254.169.254:80', '10.96.0.10:5000']);
  await t.rejects(pull('169.254.169.254:80/latest/meta-data:v1'), {
    message: /refused: 169\.254\.169\.254:80: 169\.254\.169\.254 is a link-local address/,
  });
  await t.rejects(pull('10.96.0.10:5000/app:v1'), {
    message: /refused: 10\.96\.0\.10:5000: 10\.96\.0\.10 is in 10\.96\.0\.0\/12, which this node refuses/,
  });
});

t.test('redirects are checked hop by hop: to the node, to link-local, to another loopback port', async (t) => {
  const { registry } = await registryWith(t, 'disk');
  const { registry: storage } = await registryWith(t, 'other');
  const { pull, store } = await service(t, [registry.host]);
  for (const [target, why] of [
    ['http://169.254.169.254', /169\.254\.169\.254 is a link-local address/],
    [storage.base, /127\.0\.0\.1 is the node's loopback/],
  ] as const) {
    registry.redirectBlobsTo(target);
    await t.rejects(pull(`${registry.host}/disk:v1`), { message: why }, `a blob redirected to ${target}`);
  }
  t.same(seen(storage), [], "the other port on the node heard nothing: the listed registry's leave does not follow its redirects");
  t.same(await store.blobDigests(), [], 'nothing stored');
});

t.test("a listed registry's connections are not reused by requests it did not make", async (t) => {
  // Listed by name, so only the connection pool (not a literal address check) keeps the other registry's redirect off it.
  const { registry: local } = await registryWith(t, 'disk');
  const localByName = `localhost:${local.host.split(':')[1]}`;
  const { registry: remote } = await registryWith(t, 'app');
  const { pull } = await service(t, [localByName, remote.host]);
  t.match(await pull(`${localByName}/disk:v1`), { pulled: true }, 'the listed registry, by name');
  const before = local.requests.length;
  remote.redirectBlobsTo(`http://${localByName}`);
  await t.rejects(pull(`${remote.host}/app:v1`), { message: /refused: localhost:\d+: localhost: 127\.0\.0\.1 is the node's loopback/ });
  t.equal(local.requests.length, before, 'the listed registry heard nothing of the other one');
});

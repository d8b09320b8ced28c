// The node's image store between tenants and on a small disk, with a real
// registry (Debian's docker-registry on loopback, one behind htpasswd) and
// the agent's store on a 96 MiB ext4 filesystem of its own (a loop device):
// - KEP-2535: tenant A pulls a private image with its secret; tenant B, an
//   `edit` ServiceAccount in another namespace, naming the same image
//   without a secret or with a wrong one gets ErrImagePull after the node
//   asked the registry with B's credentials; with Never, ErrImageNeverPull;
//   with the right credentials in its own secret, the image it is handed.
// - Garbage collection: when a pull fills the filesystem past 85 %, the
//   image no pod uses any more goes, the one a running VM uses stays, and
//   `vkvm images rm` refuses it naming the pod.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, statfsSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { dockerConfigJson, pushImage, qcow2Image, tarLayer } from '../helpers/oci.js';
import {
  agentLogLines,
  CLI,
  createTenant,
  poll,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  testGuestPod,
  testNamespace,
  waitFor,
  waitForGone,
  type TestNamespace,
} from './framework/index.js';

// Short: the state dir's path, and so each launcher's socket path, is built from it.
const NODE = 'vkvm-e2e-imgst';
const RUN_DEADLINE_MS = 180_000;

/** A pod booting `image` on this test's node; a disk that boots nothing needs little memory. */
function vmPod(name: string, image: string, opts: { pullPolicy?: string; secret?: string } = {}): V1Pod {
  const pod = testGuestPod({
    name,
    node: NODE,
    image,
    restartPolicy: 'Never',
    resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '64Mi' } },
  });
  if (opts.pullPolicy) pod.spec!.containers[0]!.imagePullPolicy = opts.pullPolicy;
  if (opts.secret) pod.spec!.imagePullSecrets = [{ name: opts.secret }];
  return pod;
}

/** A filesystem of its own for the image store: an ext4 image on a loop device, unmounted after the agent is gone. */
function smallFilesystem(t: Test, mib: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'vkvm-e2e-store-'));
  const image = `${dir}.ext4`;
  writeFileSync(image, '');
  truncateSync(image, mib * 2 ** 20);
  execFileSync('mkfs.ext4', ['-q', '-m', '0', image]);
  execFileSync('mount', ['-o', 'loop', image, dir]);
  t.teardown(() => {
    // Lazy: the mount goes as soon as nothing holds it (the loop device with it), whatever still did at this moment.
    if (spawnSync('umount', ['-l', dir]).status === 0) rmSync(dir, { recursive: true, force: true });
    rmSync(image, { force: true });
  });
  return dir;
}

t.test('the image store between tenants (KEP-2535) and on a small disk (garbage collection)', async (t) => {
  const dir = t.testdir();
  const open = await startDockerRegistry(t, { dir: join(dir, 'open') });
  const locked = await startDockerRegistry(t, { dir: join(dir, 'locked'), auth: { user: 'alice', password: 's3cret' } });
  const privateImage = `${locked.host}/e2e/private:v1`;
  const privateDigest = await pushImage(locked.base, 'e2e/private', 'v1', [qcow2Image(dir)], { auth: 'alice:s3cret' });

  const storeDir = smallFilesystem(t, 96);
  const { bsize, blocks } = statfsSync(storeDir);
  // Three of these fill the filesystem past 85 %, two stay well below.
  const layerBytes = Math.floor(blocks * bsize * 0.3);
  const bigImage = (repo: string) =>
    pushImage(open.base, repo, 'v1', [qcow2Image(dir, [tarLayer([{ path: 'data/random', content: randomBytes(layerBytes) }])])]);
  await Promise.all(['e2e/keep', 'e2e/old', 'e2e/new'].map(bigImage));

  const cluster = await startTestCluster(t);
  const agent = await startAgent(t, cluster, {
    nodeName: NODE,
    extraArgs: [
      `--local-registry=${open.host}`,
      `--local-registry=${locked.host}`,
      `--image-store-dir=${storeDir}`,
      // Images here are seconds old when the disk fills.
      '--image-minimum-gc-age=0s',
    ],
    // The 96 MiB filesystem is sized for the images this test pushes.
    testGuestImages: false,
  });
  const nsA = await testNamespace(t, cluster, 'e2e-image-store-a');
  const nsB = await testNamespace(t, cluster, 'e2e-image-store-b');
  const tenantA = await createTenant(cluster.clients, nsA.name);
  const tenantB = await createTenant(cluster.clients, nsB.name);
  const create = (tenant: KubeClients, ns: TestNamespace, pod: V1Pod) => tenant.core.createNamespacedPod({ namespace: ns.name, body: pod });
  const secret = (tenant: KubeClients, ns: TestNamespace, name: string, password: string) =>
    tenant.core.createNamespacedSecret({
      namespace: ns.name,
      body: { metadata: { name }, type: 'kubernetes.io/dockerconfigjson', data: dockerConfigJson(locked.host, 'alice', password) },
    });
  const running = (ns: TestNamespace, name: string) =>
    waitFor(ns.pod(name), (p) => p.status?.phase === 'Running', { what: 'Running', deadlineMs: RUN_DEADLINE_MS });
  const waiting = (ns: TestNamespace, name: string, reasons: string[]) =>
    waitFor(ns.pod(name), (p) => reasons.includes(p.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? ''), {
      what: `waiting with ${reasons.join(' or ')}`,
      deadlineMs: 90_000,
    });
  const waitingOf = (p: V1Pod) => p.status?.containerStatuses?.[0]?.state?.waiting;
  const remove = async (tenant: KubeClients, ns: TestNamespace, ...names: string[]) => {
    await Promise.all(names.map((name) => tenant.core.deleteNamespacedPod({ name, namespace: ns.name, body: { gracePeriodSeconds: 0 } })));
    for (const name of names) await waitForGone(ns.pod(name), { what: 'deleted', deadlineMs: 60_000 });
  };
  const imagesLs = () => spawnSync(process.execPath, [CLI, 'images', 'ls', `--image-store-dir=${storeDir}`], { encoding: 'utf8' }).stdout;

  await t.test("tenant B is not handed tenant A's secret-pulled image without credentials the registry accepts", async (t) => {
    await secret(tenantA, nsA, 'pull', 's3cret');
    await create(tenantA, nsA, vmPod('a-private', privateImage, { secret: 'pull' }));
    t.match((await running(nsA, 'a-private')).status?.containerStatuses?.[0], { imageID: `${locked.host}/e2e/private@${privateDigest}` });

    const mark = locked.log.length;
    await create(tenantB, nsB, vmPod('b-no-secret', privateImage, { pullPolicy: 'IfNotPresent' }));
    const noSecret = await waiting(nsB, 'b-no-secret', ['ErrImagePull', 'ImagePullBackOff']);
    t.match(waitingOf(noSecret)?.message, /did not accept this pod's: unauthorized: .* requires authentication/, 'no secret: refused');
    const asked = locked.requestsSince(mark);
    t.ok(asked.includes(`HEAD /v2/e2e/private/manifests/${privateDigest}`), 'the node asked the registry, as tenant B, for the manifest');
    t.same(
      asked.filter((r) => r.includes('/blobs/')),
      [],
      'and fetched no blob: the image on the node was never handed over',
    );

    await secret(tenantB, nsB, 'wrong', 'guess');
    await create(tenantB, nsB, vmPod('b-wrong', privateImage, { secret: 'wrong' }));
    t.match(
      waitingOf(await waiting(nsB, 'b-wrong', ['ErrImagePull', 'ImagePullBackOff']))?.message,
      new RegExp(`refused the credentials from pull secret ${nsB.name}/wrong`),
      'a wrong password: refused, naming the secret',
    );
    await create(tenantB, nsB, vmPod('b-never', privateImage, { pullPolicy: 'Never' }));
    t.match(
      waitingOf(await waiting(nsB, 'b-never', ['ErrImageNeverPull'])),
      { reason: 'ErrImageNeverPull', message: /is present, but was pulled with credentials this pod does not have/ },
      'Never cannot ask the registry: refused',
    );
    t.same(
      [...qemuPidsOf(noSecret.metadata!.uid!), ...qemuPidsOf((await nsB.readPod('b-wrong')).metadata!.uid!)],
      [],
      'no VM of the refused pods',
    );

    await secret(tenantB, nsB, 'right', 's3cret');
    await create(tenantB, nsB, vmPod('b-right', privateImage, { secret: 'right' }));
    t.match(
      (await running(nsB, 'b-right')).status?.containerStatuses?.[0],
      { imageID: `${locked.host}/e2e/private@${privateDigest}` },
      "tenant B's own copy of the credentials: it runs",
    );
    await remove(tenantB, nsB, 'b-no-secret', 'b-wrong', 'b-never', 'b-right');
    await remove(tenantA, nsA, 'a-private');
  });

  await t.test('a full disk: the image no pod uses goes, the one a running VM uses stays and rm refuses it', async (t) => {
    await create(tenantA, nsA, vmPod('gc-keep', `${open.host}/e2e/keep:v1`));
    await create(tenantA, nsA, vmPod('gc-old', `${open.host}/e2e/old:v1`));
    const keep = await running(nsA, 'gc-keep');
    await running(nsA, 'gc-old');
    t.match(imagesLs(), /e2e\/keep:v1[\s\S]*e2e\/old:v1/, 'two large images in the store, below the threshold');
    await remove(tenantA, nsA, 'gc-old');

    await create(tenantA, nsA, vmPod('gc-new', `${open.host}/e2e/new:v1`));
    await running(nsA, 'gc-new');
    const ls = await poll(
      'the unused image garbage-collected',
      async () => imagesLs(),
      (out) => !out.includes('e2e/old'),
      {
        deadlineMs: 60_000,
      },
    );
    t.match(ls, /e2e\/keep:v1/, 'the image the running VM uses stays');
    t.match(ls, /e2e\/new:v1/, 'and the one just pulled');
    const collected = agentLogLines(agent, 'image garbage-collected').map((l) => String(l.image));
    t.ok(
      collected.some((image) => image.startsWith(`${open.host}/e2e/old@sha256:`)) && !collected.some((image) => image.includes('e2e/keep')),
      `the agent logs what went (the private image, unused for longer, may go too): ${collected.join(', ')}`,
    );
    t.equal((await nsA.readPod('gc-keep')).status?.phase, 'Running', 'the VM whose image stayed still runs');
    t.not(qemuPidsOf(keep.metadata!.uid!).length, 0, 'its QEMU too');

    const rm = spawnSync(process.execPath, [CLI, 'images', 'rm', `${open.host}/e2e/keep:v1`, `--image-store-dir=${storeDir}`], {
      encoding: 'utf8',
    });
    t.match(
      { status: rm.status, stderr: rm.stderr },
      {
        status: 1,
        stderr: `vkvm: ${open.host}/e2e/keep:v1 is in use by pod ${nsA.name}/gc-keep on this node; it is kept until that pod is gone\n`,
      },
      'vkvm images rm refuses it, naming the pod',
    );
    await remove(tenantA, nsA, 'gc-keep', 'gc-new');
  });
});

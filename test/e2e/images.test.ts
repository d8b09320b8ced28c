// Registry images on the real control plane with a real registry (Debian's
// docker-registry, started here on loopback ports, one open and one behind
// htpasswd), holding images this test builds: a qcow2 containerDisk made with
// qemu-img, the test guest's kernel and initramfs as a kernel-boot image,
// and broken ones. Pods and VMIs run them by tag and by digest; pull secrets,
// pull policies, shared pulls, a corrupted blob and KubeVirt's rules for the
// disk inside the image are reported as the kubelet would report them.
import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { ensureTestGuest, GUEST_CMDLINE } from '../../vmm/guest/build.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { buildImage, pushImage, tarLayer, type TestImage } from '../helpers/oci.js';
import {
  CLI,
  condition,
  kubevirtIn,
  nodes,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  testGuestPod,
  testLog,
  testNamespace,
  waitFor,
  waitForAll,
} from './framework/index.js';

const NODE = 'vkvm-e2e-images';
const NS = 'e2e-images';
const RUN_DEADLINE_MS = 180_000;

/** A pod booting `image` on this test's node; a disk that boots nothing needs little memory. */
function vmPod(name: string, image: string, opts: { pullPolicy?: string; secrets?: string[] } = {}): V1Pod {
  const pod = testGuestPod({
    name,
    node: NODE,
    image,
    restartPolicy: 'Never',
    resources: { requests: { cpu: '50m', memory: '64Mi' }, limits: { memory: '64Mi' } },
  });
  if (opts.pullPolicy) pod.spec!.containers[0]!.imagePullPolicy = opts.pullPolicy;
  if (opts.secrets) pod.spec!.imagePullSecrets = opts.secrets.map((secret) => ({ name: secret }));
  return pod;
}

/** A VMI whose one disk is a containerDisk; a kernel-boot image when given. */
function registryVmi(name: string, disk: { image: string; imagePullSecret?: string }, kernelImage?: string): VirtualMachineInstance {
  return {
    apiVersion: 'kubevirt.io/v1',
    kind: 'VirtualMachineInstance',
    metadata: { name },
    spec: {
      domain: {
        resources: { requests: { memory: kernelImage ? '128Mi' : '64Mi' } },
        ...(kernelImage
          ? {
              firmware: {
                kernelBoot: {
                  kernelArgs: GUEST_CMDLINE,
                  container: { image: kernelImage, kernelPath: '/boot/vmlinuz', initrdPath: '/boot/initrd.img' },
                },
              },
            }
          : {}),
        devices: { disks: [{ name: 'root', disk: { bus: 'virtio' } }] },
      },
      volumes: [{ name: 'root', containerDisk: disk }],
    },
  };
}

/** A containerDisk as quay.io/containerdisks ship them: one gzip layer, /disk/disk.img a qcow2 (an empty one: QEMU runs it, nothing boots). */
function qcow2Image(dir: string, extraLayers: Buffer[] = []): TestImage {
  const file = join(dir, `disk-${randomBytes(4).toString('hex')}.qcow2`);
  // A size of its own makes each image's layer unique, so no test finds its blobs already on the node.
  execFileSync('qemu-img', ['create', '-q', '-f', 'qcow2', file, `${16 + Math.floor(Math.random() * 4096)}M`]);
  return buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: readFileSync(file) }]) }, ...extraLayers.map((tar) => ({ tar }))]);
}

const dockerConfig = (host: string, user: string, password: string) => ({
  '.dockerconfigjson': Buffer.from(
    JSON.stringify({ auths: { [host]: { auth: Buffer.from(`${user}:${password}`).toString('base64') } } }),
  ).toString('base64'),
});

t.test('pods and VMIs run images from a registry, as the kubelet pulls them', async (t) => {
  const dir = t.testdir();
  const open = await startDockerRegistry(t, { dir: join(dir, 'open') });
  const locked = await startDockerRegistry(t, { dir: join(dir, 'locked'), auth: { user: 'alice', password: 's3cret' } });
  const guest = await ensureTestGuest({ log: (msg) => testLog.info(msg) });

  const disk = qcow2Image(dir);
  const diskDigest = await pushImage(open.base, 'e2e/disk', 'v1', [disk]);
  const kernelFiles = [
    { path: 'boot/vmlinuz', content: readFileSync(guest.kernelPath) },
    { path: 'boot/initrd.img', content: readFileSync(guest.initrdPath) },
  ];
  await pushImage(open.base, 'e2e/test-guest-kernel', 'v1', [buildImage([{ tar: tarLayer(kernelFiles), compression: 'zstd' }])]);
  await pushImage(locked.base, 'e2e/private', 'v1', [qcow2Image(dir)], { auth: 'alice:s3cret' });
  const shared = qcow2Image(dir, [tarLayer([{ path: 'data/random', content: randomBytes(4 << 20) }])]);
  await pushImage(open.base, 'e2e/shared', 'v1', [shared]);
  const corrupt = qcow2Image(dir);
  await pushImage(open.base, 'e2e/corrupt', 'v1', [corrupt]);
  const layer = corrupt.layers[0]!;
  // Served under the digest it was pushed with, but other bytes of the same length.
  const hex = layer.digest.slice('sha256:'.length);
  writeFileSync(
    join(dir, 'open', 'storage', 'docker', 'registry', 'v2', 'blobs', 'sha256', hex.slice(0, 2), hex, 'data'),
    Buffer.from(layer.data.map((b) => b ^ 0xff)),
  );
  const twoFiles = [{ tar: tarLayer([{ path: 'disk/a.img', content: 'a' }]) }, { tar: tarLayer([{ path: 'disk/b.img', content: 'b' }]) }];
  await pushImage(open.base, 'bad/two-files', 'v1', [buildImage(twoFiles)]);
  const symlink = [
    { path: 'etc/passwd', content: 'x' },
    { path: 'disk/disk.img', symlink: '/etc/passwd' },
  ];
  await pushImage(open.base, 'bad/symlink', 'v1', [buildImage([{ tar: tarLayer(symlink) }])]);

  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  const agent = await startAgent(t, cluster, { nodeName: NODE });
  const ns = await testNamespace(t, cluster, NS);
  const kv = kubevirtIn(ns);
  const core = cluster.clients.core;
  for (const [name, password] of [
    ['pull', 's3cret'],
    ['wrong', 'guess'],
  ] as const) {
    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name }, type: 'kubernetes.io/dockerconfigjson', data: dockerConfig(locked.host, 'alice', password) },
    });
  }

  const running = (name: string) =>
    waitFor(ns.pod(name), (p) => p.status?.phase === 'Running', { what: 'Running', deadlineMs: RUN_DEADLINE_MS });
  const waiting = (name: string, reasons: string[]) =>
    waitFor(ns.pod(name), (p) => reasons.includes(p.status?.containerStatuses?.[0]?.state?.waiting?.reason ?? ''), {
      what: `waiting with ${reasons.join(' or ')}`,
      deadlineMs: 90_000,
    });
  const waitingMessage = (p: V1Pod) => p.status?.containerStatuses?.[0]?.state?.waiting?.message;
  /** An object's events once one of them has `reason`. */
  const eventsWith = (uid: string, reason: string) =>
    waitForAll(ns.eventsOf(uid), (es) => es.some((e) => e.reason === reason), { what: `with a ${reason} event` });
  const messages = (es: Array<{ reason?: string; message?: string }>, reason: string) =>
    es.filter((e) => e.reason === reason).map((e) => e.message);
  const storeHas = (digest: string) => existsSync(join(agent.stateDir, 'images', 'blobs', 'sha256', digest.slice('sha256:'.length)));
  const imagesLs = () => spawnSync(process.execPath, [CLI, 'images', 'ls', `--state-dir=${agent.stateDir}`], { encoding: 'utf8' }).stdout;
  // VMs a subtest is done with go at once (grace 0): sixteen TCG guests on two cores would slow the rest.
  const remove = (...names: string[]) =>
    Promise.all(names.map((name) => core.deleteNamespacedPod({ name, namespace: NS, body: { gracePeriodSeconds: 0 } })));

  await t.test('a pod by tag runs the pulled disk; imageID is the digest; Pulling and Pulled events', async (t) => {
    await ns.createPod(vmPod('by-tag', `${open.host}/e2e/disk:v1`));
    const pod = await running('by-tag');
    t.match(pod.status?.containerStatuses?.[0], {
      image: `${open.host}/e2e/disk:v1`,
      imageID: `${open.host}/e2e/disk@${diskDigest}`,
      state: { running: {} },
    });
    t.not(qemuPidsOf(pod.metadata!.uid!).length, 0, 'QEMU runs');
    const events = await eventsWith(pod.metadata!.uid!, 'Pulled');
    t.match(
      { pulling: messages(events, 'Pulling'), pulled: messages(events, 'Pulled') },
      {
        pulling: [`Pulling image "${open.host}/e2e/disk:v1"`],
        pulled: [new RegExp(`^Successfully pulled image "${open.host}/e2e/disk:v1" in \\d+\\.\\d+s\\. Image size: \\d+ bytes\\.$`)],
      },
    );
  });

  await t.test('IfNotPresent with the image cached: the registry is not asked', async (t) => {
    const mark = open.log.length;
    await ns.createPod(vmPod('cached', `${open.host}/e2e/disk:v1`, { pullPolicy: 'IfNotPresent' }));
    const pod = await running('cached');
    t.same(open.requestsSince(mark), [], "the registry's log shows no request");
    const events = await eventsWith(pod.metadata!.uid!, 'Pulled');
    t.same(messages(events, 'Pulled'), [`Container image "${open.host}/e2e/disk:v1" already present on machine`]);
    await remove('by-tag', 'cached');
  });

  await t.test("the node reports its images (node.status.images) for the scheduler's image locality", async (t) => {
    const named = (n: V1Node) => n.status?.images?.find((i) => i.names?.includes(`${open.host}/e2e/disk:v1`));
    const node = await waitFor(nodes(cluster.clients, { name: NODE }), (n) => !!named(n), {
      what: 'with the pulled image in status.images',
    });
    t.match(named(node), { names: [`${open.host}/e2e/disk:v1`, `${open.host}/e2e/disk@${diskDigest}`], sizeBytes: Number });
  });

  await t.test('a pod by digest runs; Never with the image absent is ErrImageNeverPull', async (t) => {
    await ns.createPod(vmPod('by-digest', `${open.host}/e2e/disk@${diskDigest}`));
    t.match((await running('by-digest')).status?.containerStatuses?.[0], { imageID: `${open.host}/e2e/disk@${diskDigest}` });
    await ns.createPod(vmPod('never', `${open.host}/e2e/absent:v1`, { pullPolicy: 'Never' }));
    const never = await waiting('never', ['ErrImageNeverPull']);
    t.match(never.status, {
      phase: 'Pending',
      containerStatuses: [
        {
          state: {
            waiting: {
              reason: 'ErrImageNeverPull',
              message: `Container image "${open.host}/e2e/absent:v1" is not present with pull policy of Never`,
            },
          },
        },
      ],
    });
    await remove('by-digest', 'never');
  });

  await t.test('a VMI boots a kernel-boot image by tag with its containerDisk by digest', async (t) => {
    await kv.createVmi(
      registryVmi('registry-vmi', { image: `${open.host}/e2e/disk@${diskDigest}` }, `${open.host}/e2e/test-guest-kernel:v1`),
    );
    const ready = await waitFor(ns.vmi('registry-vmi'), (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
      what: 'Running and Ready (the pulled kernel booted)',
      deadlineMs: RUN_DEADLINE_MS,
    });
    t.match(ready.status, { phase: 'Running', nodeName: NODE });
    const [pod] = await waitForAll(ns.pods({ labelSelector: `kubevirt.io/created-by=${ready.metadata.uid}` }), (ps) => ps.length === 1);
    t.match(
      pod?.status?.containerStatuses?.[0],
      { imageID: `${open.host}/e2e/disk@${diskDigest}` },
      "the launcher pod's imageID is its containerDisk's digest",
    );
    await kv.deleteVmi('registry-vmi');
  });

  await t.test('an auth registry: no secret is unauthorized, then back-off; a wrong password says so; the right secret runs', async (t) => {
    const image = `${locked.host}/e2e/private:v1`;
    await ns.createPod(vmPod('no-secret', image));
    const first = await waiting('no-secret', ['ErrImagePull']);
    t.match(waitingMessage(first), new RegExp(`^Failed to pull image "${image}": unauthorized: `), 'ErrImagePull naming unauthorized');
    const backOff = await waiting('no-secret', ['ImagePullBackOff']);
    t.match(waitingMessage(backOff), /unauthorized/, 'then ImagePullBackOff, saying why');

    await ns.createPod(vmPod('wrong-password', image, { secrets: ['wrong'] }));
    const wrong = await waiting('wrong-password', ['ErrImagePull', 'ImagePullBackOff']);
    t.match(waitingMessage(wrong), new RegExp(`unauthorized: ${locked.host} refused the credentials from pull secret ${NS}/wrong`));

    await ns.createPod(vmPod('with-secret', image, { secrets: ['missing', 'pull'] }));
    t.match((await running('with-secret')).status?.containerStatuses?.[0], { imageID: new RegExp(`^${locked.host}/e2e/private@sha256:`) });

    await kv.createVmi(registryVmi('private-vmi', { image, imagePullSecret: 'pull' }));
    const vmi = await waitFor(ns.vmi('private-vmi'), (v) => v.status?.phase === 'Running', {
      what: 'Running',
      deadlineMs: RUN_DEADLINE_MS,
    });
    t.equal(vmi.status?.phase, 'Running', "a VMI's containerDisk.imagePullSecret reaches the node through its launcher pod");
    await kv.deleteVmi('private-vmi');
    await remove('no-secret', 'wrong-password', 'with-secret');
  });

  await t.test('ten pods on one new image: one download of each blob', async (t) => {
    const mark = open.log.length;
    const names = Array.from({ length: 10 }, (_, i) => `shared-${i}`);
    await Promise.all(names.map((name) => ns.createPod(vmPod(name, `${open.host}/e2e/shared:v1`))));
    for (const name of names) await running(name);
    const blobGets = open.requestsSince(mark).filter((r) => r.startsWith('GET /v2/e2e/shared/blobs/'));
    t.same(
      blobGets.sort(),
      [shared.config, ...shared.layers].map((b) => `GET /v2/e2e/shared/blobs/${b.digest}`).sort(),
      'each blob fetched once',
    );
    await remove(...names);
  });

  await t.test('a corrupted blob is refused and nothing of it is kept', async (t) => {
    await ns.createPod(vmPod('corrupt', `${open.host}/e2e/corrupt:v1`));
    const pod = await waiting('corrupt', ['ErrImagePull', 'ImagePullBackOff']);
    t.match(waitingMessage(pod), new RegExp(`blob ${layer.digest} does not match its digest`));
    t.notOk(storeHas(layer.digest), 'the blob is not in the store');
    t.notMatch(imagesLs(), /e2e\/corrupt/, 'no image recorded');
  });

  await t.test('what KubeVirt would not boot: two files under /disk, a symlink as the disk; named, with the image', async (t) => {
    await ns.createPod(vmPod('two-files', `${open.host}/bad/two-files:v1`));
    await ns.createPod(vmPod('symlink', `${open.host}/bad/symlink:v1`));
    const two = await waiting('two-files', ['ErrImagePull', 'ImagePullBackOff']);
    const link = await waiting('symlink', ['ErrImagePull', 'ImagePullBackOff']);
    t.same(
      [waitingMessage(two), waitingMessage(link)],
      [
        `Failed to pull image "${open.host}/bad/two-files:v1": the image has more than one entry under /disk (b.img, a.img); KubeVirt boots a containerDisk with exactly one, or the one containerDisk.path names`,
        `Failed to pull image "${open.host}/bad/symlink:v1": /disk/disk.img is a symbolic link (to /etc/passwd); the disk or kernel must be a regular file in the image`,
      ],
    );
    t.same([...qemuPidsOf(two.metadata!.uid!), ...qemuPidsOf(link.metadata!.uid!)], [], 'no QEMU');
  });
});

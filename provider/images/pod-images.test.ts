import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { LOOPBACK_PULLS, startFakeRegistry } from '../../test/helpers/fake-registry.js';
import { buildImage, tarLayer } from '../../test/helpers/oci.js';
import type { EventRecorder } from '../kube/events.js';
import { testSpec } from '../../vmm/testing/specs.js';
import { ImageService } from './image-service.js';
import { PinStore } from './pins.js';
import { PodImages } from './pod-images.js';
import { ImageStore } from './store.js';

const log = pino({ level: 'silent' });

async function setup(t: Test) {
  const registry = await startFakeRegistry(t, { kind: 'basic', user: 'alice', password: 'pw' });
  const store = new ImageStore(join(t.testdir(), 'images'));
  await store.init();
  const images = new ImageService({ store, ...LOOPBACK_PULLS, maxParallelPulls: 2, maxImageBytes: 1 << 30, log });
  t.teardown(() => images.close());
  const events: string[] = [];
  const recorder: EventRecorder = {
    record: (_pod, type, reason, message) => void events.push(`${type} ${reason}: ${message}`),
    recordFor: () => undefined,
  };
  const secret = {
    type: 'kubernetes.io/dockerconfigjson',
    data: {
      '.dockerconfigjson': Buffer.from(JSON.stringify({ auths: { [registry.host]: { username: 'alice', password: 'pw' } } })).toString(
        'base64',
      ),
    },
  };
  const pins = new PinStore(store.pinsDir);
  const podImages = new PodImages({
    images,
    pins,
    events: recorder,
    readSecret: async (namespace, name) => (name === 'pull' ? { namespace, name, ...secret } : undefined),
  });
  return { registry, store, pins, podImages, events };
}

const pod = (image: string, secrets: string[]): V1Pod => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'u' },
  spec: { imagePullSecrets: secrets.map((name) => ({ name })), containers: [{ name: 'compute', image }] },
});

const spec = testSpec;

t.test("registry sources become files in the store, marked; the kubelet's events; the pod's pull secrets", async (t) => {
  const { registry, store, pins, podImages, events } = await setup(t);
  const disk = buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: 'disk' }]) }]);
  const kernel = buildImage([
    {
      tar: tarLayer([
        { path: 'boot/vmlinuz', content: 'kernel' },
        { path: 'boot/initrd.img', content: 'initrd' },
      ]),
    },
  ]);
  registry.addImage('disk', 'v1', disk);
  registry.addImage('kernel', 'v1', kernel);
  const image = `${registry.host}/disk:v1`;
  const wanted = spec({
    disks: [
      { name: 'root', device: 'disk', bus: 'virtio', source: { kind: 'registry', image, pullPolicy: 'IfNotPresent' } },
      { name: 'data', device: 'disk', bus: 'virtio', source: { kind: 'empty', sizeMiB: 16 } },
    ],
    kernelBoot: {
      kernelPath: '/boot/vmlinuz',
      initrdPath: '/boot/initrd.img',
      cmdline: 'console=ttyS0',
      container: { image: `${registry.host}/kernel:v1`, pullPolicy: 'IfNotPresent' },
    },
  });
  const resolved = await podImages.resolve(pod(image, ['missing', 'pull']), wanted, log);
  t.match(resolved, {
    fromRegistry: true,
    imageID: `${registry.host}/disk@${disk.manifest.digest}`,
    spec: {
      disks: [
        { name: 'root', source: { kind: 'image', path: new RegExp(`^${store.root}/files/`), fromImageStore: true } },
        { name: 'data', source: { kind: 'empty' } },
      ],
      kernelBoot: { cmdline: 'console=ttyS0', fromImageStore: true },
    },
  });
  t.notOk(resolved.spec.kernelBoot?.container, 'nothing left to pull');
  const root = resolved.spec.disks[0]!.source as { path: string };
  t.same(
    [
      readFileSync(root.path, 'utf8'),
      readFileSync(resolved.spec.kernelBoot!.kernelPath, 'utf8'),
      readFileSync(resolved.spec.kernelBoot!.initrdPath!, 'utf8'),
    ],
    ['disk', 'kernel', 'initrd'],
  );
  t.match(events, [
    `Normal Pulling: Pulling image "${image}"`,
    new RegExp(`^Normal Pulled: Successfully pulled image "${image}" in \\d+\\.\\d{3}s\\. Image size: \\d+ bytes\\.$`),
    `Normal Pulling: Pulling image "${registry.host}/kernel:v1"`,
    /^Normal Pulled: Successfully pulled/,
  ]);
  t.same(
    await pins.list(),
    [
      {
        uid: 'u',
        pod: 'ns/vm',
        references: [image, `${registry.host}/kernel:v1`],
        imageIds: [`${registry.host}/disk@${disk.manifest.digest}`, `${registry.host}/kernel@${kernel.manifest.digest}`],
      },
    ],
    'the pod pins what it named and what that resolved to',
  );
  events.length = 0;
  const seen = registry.requests.length;
  t.same(await podImages.resolve(pod(image, ['pull']), wanted, log), resolved, 'the same files again, from the store');
  t.same(events, [
    `Normal Pulled: Container image "${image}" already present on machine`,
    `Normal Pulled: Container image "${registry.host}/kernel:v1" already present on machine`,
  ]);
  t.same(await podImages.resolveRunning(wanted), resolved.spec, 'a running VM’s spec comes from the store alone');
  t.equal(registry.requests.length, seen, 'no registry request once present, for the credentials that pulled it');
  await t.rejects(
    podImages.resolve(pod(image, []), wanted, log),
    { reason: 'ErrImagePull', message: /did not accept this pod's: unauthorized: / },
    'a pod without the credentials is not handed the image the node holds',
  );
  t.same(
    registry.requests.slice(seen).map((r) => r.line),
    [`HEAD /v2/disk/manifests/${disk.manifest.digest}`],
    'the registry was asked, with the pod’s own (no) credentials, for the manifest by digest',
  );
  t.same(
    await podImages.resolve(pod('/var/lib/images/disk.qcow2', []), spec({}), log),
    { spec: spec({}), fromRegistry: false },
    'a spec without registry images passes as it is',
  );
});

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { pino } from 'pino';
import t, { type Test } from 'tap';
import { startFakeRegistry } from '../../test/helpers/fake-registry.js';
import { buildImage, tarLayer } from '../../test/helpers/oci.js';
import type { EventRecorder } from '../kube/events.js';
import { VM_SPEC_VERSION, type VmSpec } from '../../vmm/spec.js';
import { ImageService } from './image-service.js';
import { PodImages } from './pod-images.js';
import { ImageStore } from './store.js';

const log = pino({ level: 'silent' });

async function setup(t: Test) {
  const registry = await startFakeRegistry(t, { kind: 'basic', user: 'alice', password: 'pw' });
  const store = new ImageStore(join(t.testdir(), 'images'));
  await store.init();
  const images = new ImageService({ store, maxParallelPulls: 2, maxImageBytes: 1 << 30, log });
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
  const podImages = new PodImages({
    images,
    events: recorder,
    readSecret: async (namespace, name) => (name === 'pull' ? { namespace, name, ...secret } : undefined),
  });
  return { registry, store, podImages, events };
}

const pod = (image: string, secrets: string[]): V1Pod => ({
  metadata: { name: 'vm', namespace: 'ns', uid: 'u' },
  spec: { imagePullSecrets: secrets.map((name) => ({ name })), containers: [{ name: 'compute', image }] },
});

const spec = (over: Partial<VmSpec>): VmSpec => ({
  version: VM_SPEC_VERSION,
  uid: '6f1c2a4e-0000-4000-8000-000000000001',
  name: 'ns_vm',
  cpu: { sockets: 1, cores: 1, threads: 1 },
  memoryMiB: 64,
  firmware: { kind: 'bios' },
  disks: [],
  interfaces: [],
  guestAgent: false,
  acpi: true,
  labels: {},
  ...over,
});

t.test("registry sources become files in the store, marked; the kubelet's events; the pod's pull secrets", async (t) => {
  const { registry, store, podImages, events } = await setup(t);
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
  events.length = 0;
  const seen = registry.requests.length;
  t.same(await podImages.resolve(pod(image, []), wanted, log), resolved, 'the same files again, from the store');
  t.same(events, [
    `Normal Pulled: Container image "${image}" already present on machine`,
    `Normal Pulled: Container image "${registry.host}/kernel:v1" already present on machine`,
  ]);
  t.same(await podImages.resolveRunning(wanted), resolved.spec, 'a running VM’s spec comes from the store alone');
  t.equal(registry.requests.length, seen, 'no registry request once present');
  t.same(
    await podImages.resolve(pod('vkvm/test-guest', []), spec({}), log),
    { spec: spec({}), fromRegistry: false },
    'a spec without registry images passes as it is',
  );
});

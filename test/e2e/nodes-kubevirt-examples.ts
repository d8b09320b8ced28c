// The multi-node suite's (multi-node/nodes.ts) run of KubeVirt's storage
// examples (test/e2e/fixtures/kubevirt-examples/, verbatim): vmi-pvc, a VMI
// on the claim `disk-alpine`, and vm-alpine-datavolume, a VM whose
// dataVolumeTemplates import its disk from a registry into a claim of class
// `local`. As a tenant with kubectl, changed only in their registry host:
// KubeVirt's test registry `registry:5000` becomes a real registry (Debian's
// docker-registry) on the host's address on the nodes' segment, which every
// node reaches (`vkvm up` lists it as a local, plain-HTTP registry), holding
// the test guest's disk under the examples' image name. The tenant makes
// `disk-alpine` as a user would, a DataVolume from that image (KubeVirt's own
// tests bind it to a hostPath PV). `local` is a class of KubeVirt's test
// clusters: until the administrator makes one, the DataVolume names the
// field; once it exists (vkvm's CSI driver behind it), the VM starts. Both
// guests boot from their imported disks.
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { StorageV1Api } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';
import type { DataVolume } from '../../provider/kubevirt/datavolume-types.js';
import { packageRoot } from '../../provider/package-root.js';
import { ensureTestGuestDisk } from '../../vmm/guest/boot-disk.js';
import { GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { buildImage, pushImage, tarLayer } from '../helpers/oci.js';
import {
  condition,
  dataVolumes,
  persistentVolumeClaims,
  poll,
  testLog,
  virtualMachineInstances,
  virtualMachines,
  waitFor,
  waitForGone,
  type CommandResult,
} from './framework/index.js';

const FIXTURES = join(packageRoot(), 'test', 'e2e', 'fixtures', 'kubevirt-examples');
const EXAMPLES = ['vmi-pvc', 'vm-alpine-datavolume'] as const;
/** The image vm-alpine-datavolume imports, at KubeVirt's test registry. */
const ALPINE = { repo: 'kubevirt/alpine-container-disk-demo', tag: 'devel' };
/** The class vm-alpine-datavolume's DataVolume names: KubeVirt's test clusters have one. */
const LOCAL_CLASS = 'local';
const DEADLINE_MS = 120_000;

export interface ExamplesOptions {
  admin: KubeClients;
  tenant: KubeClients;
  namespace: string;
  /** kubectl as the tenant, in `namespace`. */
  kubectl: (args: string[]) => Promise<CommandResult>;
  /** host:port the registry listens on: one every node reaches and `vkvm up` lists as local and plain HTTP. */
  registryHost: string;
  bootDeadlineMs: number;
}

export async function kubevirtStorageExamples(t: Test, o: ExamplesOptions): Promise<void> {
  const { admin, tenant, namespace, kubectl } = o;
  // Not t.testdir(): its name is the subtests' full names, past NAME_MAX under the shared suite.
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-kvex-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const registry = await startDockerRegistry(t, { dir: join(dir, 'registry'), addr: o.registryHost });
  const disk = await ensureTestGuestDisk({ log: (msg) => testLog.info(msg) });
  await pushImage(registry.base, ALPINE.repo, ALPINE.tag, [
    buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: readFileSync(disk.path) }]) }]),
  ]);
  const image = `${registry.host}/${ALPINE.repo}:${ALPINE.tag}`;

  // The claim vmi-pvc names, as a user makes it: a DataVolume of that name, filled from the image.
  const diskAlpine: DataVolume = {
    apiVersion: 'cdi.kubevirt.io/v1beta1',
    kind: 'DataVolume',
    metadata: { name: 'disk-alpine' },
    spec: { source: { registry: { url: `docker://${image}` } }, storage: { resources: { requests: { storage: '64Mi' } } } },
  };
  const manifests = EXAMPLES.map((name) =>
    readFileSync(join(FIXTURES, `${name}.yaml`), 'utf8').replaceAll('registry:5000/', `${registry.host}/`),
  );
  t.same(
    manifests.map((m) => m.includes('registry:5000')),
    [false, false],
    'the registry host is the only change',
  );
  const file = join(dir, 'examples.yaml');
  writeFileSync(file, [JSON.stringify(diskAlpine), ...manifests].join('\n---\n'));
  const applied = await kubectl(['apply', '-f', file]);
  t.equal(applied.code, 0, `kubectl apply of disk-alpine, vmi-pvc.yaml and vm-alpine-datavolume.yaml as the tenant: ${applied.stderr}`);

  // No class `local` yet: the DataVolume's claim waits, and its Bound condition names the field.
  const noClass = await waitFor(
    dataVolumes(tenant, namespace, { name: 'alpine-dv' }),
    (d) => d.status?.conditions?.some((c) => c.type === 'Bound' && c.reason === 'StorageClassNotFound') ?? false,
    { what: 'Bound False, StorageClassNotFound', deadlineMs: DEADLINE_MS },
  );
  t.match(
    noClass.status?.conditions?.find((c) => c.type === 'Bound'),
    { status: 'False', message: /^spec\.pvc\.storageClassName: StorageClass "local" not found/ },
    "without a class `local`, vm-alpine-datavolume's DataVolume names the field that asks for it",
  );

  const storage = admin.kc.makeApiClient(StorageV1Api);
  await storage.createStorageClass({
    body: {
      metadata: { name: LOCAL_CLASS },
      provisioner: 'csi.vkvm.io',
      volumeBindingMode: 'WaitForFirstConsumer',
      reclaimPolicy: 'Delete',
    },
  });
  t.teardown(() => storage.deleteStorageClass({ name: LOCAL_CLASS }).catch(() => undefined));
  // runStrategy: Halted, as KubeVirt ships it; `virtctl start` sets Always.
  const started = await kubectl(['patch', 'vm', 'vm-alpine-datavolume', '--type', 'merge', '-p', '{"spec":{"runStrategy":"Always"}}']);
  t.equal(started.code, 0, `vm-alpine-datavolume started as the tenant: ${started.stderr}`);

  const vmiNames = ['vmi-pvc', 'vm-alpine-datavolume'];
  const vmis = await Promise.all(
    vmiNames.map((name) =>
      waitFor(
        virtualMachineInstances(tenant, namespace, { name }),
        (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True',
        {
          what: 'Running and Ready',
          deadlineMs: o.bootDeadlineMs,
        },
      ),
    ),
  );
  const consoles = await Promise.all(
    vmis.map(async (vmi) => {
      const [pod] = (await tenant.core.listNamespacedPod({ namespace, labelSelector: `kubevirt.io/created-by=${vmi.metadata.uid}` })).items;
      const logs = await poll(
        `the boot marker in ${vmi.metadata.name}'s console`,
        () => kubectl(['logs', pod?.metadata?.name ?? '']),
        (r) => r.code === 0 && r.stdout.includes(GUEST_BOOT_MARKER),
        { deadlineMs: o.bootDeadlineMs, intervalMs: 1000 },
      );
      return logs.stdout;
    }),
  );
  const vm = await waitFor(virtualMachines(tenant, namespace, { name: 'vm-alpine-datavolume' }), () => true, { what: 'read' });
  const succeeded = (name: string) =>
    waitFor(dataVolumes(tenant, namespace, { name }), (d) => d.status?.phase === 'Succeeded', {
      what: 'Succeeded',
      deadlineMs: DEADLINE_MS,
    });
  const dvs = new Map((await Promise.all(['disk-alpine', 'alpine-dv'].map(succeeded))).map((d) => [d.metadata.name, d]));
  const claimOf = (name: string) => tenant.core.readNamespacedPersistentVolumeClaim({ name, namespace });
  t.match(
    {
      vmis: vmis.map((v, i) => ({
        name: v.metadata.name,
        unsupported: v.status?.conditions?.find((c) => c.type === 'UnsupportedFields')?.message,
        booted: consoles[i]!.includes(GUEST_BOOT_MARKER),
      })),
      diskAlpine: { phase: dvs.get('disk-alpine')?.status?.phase, class: (await claimOf('disk-alpine')).spec?.storageClassName },
      alpineDv: {
        phase: dvs.get('alpine-dv')?.status?.phase,
        owner: dvs.get('alpine-dv')?.metadata.ownerReferences,
        class: (await claimOf('alpine-dv')).spec?.storageClassName,
        size: (await claimOf('alpine-dv')).status?.capacity?.storage,
      },
    },
    {
      vmis: [
        { name: 'vmi-pvc', unsupported: undefined, booted: true },
        { name: 'vm-alpine-datavolume', unsupported: undefined, booted: true },
      ],
      diskAlpine: { phase: 'Succeeded', class: 'vkvm-local' },
      alpineDv: {
        phase: 'Succeeded',
        owner: [{ kind: 'VirtualMachine', name: 'vm-alpine-datavolume', uid: vm.metadata.uid, controller: true }],
        class: LOCAL_CLASS,
        size: '2Gi',
      },
    },
    `both examples run with every field realized and boot from disks imported from ${image}: disk-alpine on the default class, alpine-dv (the VM's) on the class ${LOCAL_CLASS}`,
  );

  // Gone before the suite's next steps, which count the namespace's claims.
  const deleted = await kubectl(['delete', '--wait=false', '-f', file]);
  t.equal(deleted.code, 0, `the tenant deletes what it applied: ${deleted.stderr}`);
  await waitForGone(virtualMachineInstances(tenant, namespace, {}), { deadlineMs: DEADLINE_MS });
  await waitForGone(persistentVolumeClaims(tenant, namespace, {}), { deadlineMs: DEADLINE_MS });
}

// KubeVirt's own example manifests (vmi-ephemeral, vm-cirros, vmi-nocloud,
// vmi-kernel-boot; test/e2e/fixtures/kubevirt-examples/, verbatim) run as a
// tenant (edit in one namespace) with kubectl, changed only in their registry
// host: KubeVirt's test registry `registry:5000` becomes a real registry
// (Debian's docker-registry) on loopback, holding the test guest under the
// examples' image names — its bootable disk as
// kubevirt/cirros-container-disk-demo:devel, its kernel and initramfs as
// kubevirt/alpine-ext-kernel-boot-demo:devel at the paths the example names.
// Each VMI runs and is Ready, its console shows the guest booted, the
// examples' cloud-init user-data runs, and the kernel-boot VMI boots the
// image's kernel directly. Beside them, a VM of vm-cirros-sata's shape (no
// disks for its two volumes) gets the SATA disks KubeVirt's defaulting gives.
// A Service the tenant makes with vmi-ephemeral's label as its selector (what
// `virtctl expose vmi` makes) gets the VM's address as a ready endpoint: the
// launcher pod carries the VMI's labels.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { installClusterManifests } from '../../provider/cli/up.js';
import { startControllers } from '../../provider/controllers/cluster-controllers.js';
import type { VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { packageRoot } from '../../provider/package-root.js';
import { ensureTestGuestDisk } from '../../vmm/guest/boot-disk.js';
import { ensureTestGuest, GUEST_BOOT_MARKER } from '../../vmm/guest/build.js';
import { startDockerRegistry } from '../helpers/docker-registry.js';
import { buildImage, pushImage, tarLayer } from '../helpers/oci.js';
import { argvOf } from '../helpers/processes.js';
import {
  condition,
  createTenant,
  tenantKubectl,
  poll,
  qemuPidsOf,
  startAgent,
  startTestCluster,
  testLog,
  testNamespace,
  virtualMachineInstances,
  virtualMachines,
  waitFor,
} from './framework/index.js';

// Short: the agent's state dir, and the launcher sockets below it, are named after it (108-byte socket paths).
const NODE = 'vkvm-e2e-kvex';
const NS = 'e2e-kubevirt-examples';
const BOOT_DEADLINE_MS = 240_000;
const FIXTURES = join(packageRoot(), 'test', 'e2e', 'fixtures', 'kubevirt-examples');
const EXAMPLES = ['vmi-ephemeral', 'vm-cirros', 'vmi-nocloud', 'vmi-kernel-boot'] as const;
const USER_DATA_OUTPUT = 'printed from cloud-init userdata';
/**
 * KubeVirt's vm-cirros-sata example in shape (examples/vm-cirros-sata.yaml):
 * `devices: {}` with a containerDisk and a cloud-init volume, which KubeVirt's
 * defaulting gives SATA disks. Running from the start (the example is Halted).
 */
const sataVm = (registryHost: string): string => `
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-cirros-sata
  labels: { kubevirt.io/vm: vm-cirros-sata }
spec:
  runStrategy: Always
  template:
    metadata:
      labels: { kubevirt.io/vm: vm-cirros-sata }
    spec:
      domain:
        cpu: { cores: 1, sockets: 1, threads: 1 }
        devices: {}
        memory: { guest: 128Mi }
        resources: { requests: { memory: 128Mi } }
      terminationGracePeriodSeconds: 0
      volumes:
        - name: containerdisk
          containerDisk:
            image: ${registryHost}/kubevirt/cirros-container-disk-demo:devel
        - name: cloudinitdisk
          cloudInitNoCloud:
            userData: |
              #!/bin/sh
              echo '${USER_DATA_OUTPUT}'
`;

t.test("KubeVirt's example manifests run unchanged but for the registry host", async (t) => {
  const registry = await startDockerRegistry(t, { dir: join(t.testdir(), 'registry') });
  const disk = await ensureTestGuestDisk({ log: (msg) => testLog.info(msg) });
  // The bzImage, as alpine's vmlinuz-virt is; uncompressed layers keep the push quick.
  const guest = await ensureTestGuest({ pvh: false, log: (msg) => testLog.info(msg) });
  const diskDigest = await pushImage(registry.base, 'kubevirt/cirros-container-disk-demo', 'devel', [
    buildImage([{ tar: tarLayer([{ path: 'disk/disk.img', content: readFileSync(disk.path) }]) }]),
  ]);
  await pushImage(registry.base, 'kubevirt/alpine-ext-kernel-boot-demo', 'devel', [
    buildImage([
      {
        tar: tarLayer([
          { path: 'boot/vmlinuz-virt', content: readFileSync(guest.kernelPath) },
          { path: 'boot/initramfs-virt', content: readFileSync(guest.initrdPath) },
        ]),
        compression: 'none',
      },
    ]),
  ]);

  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const controllers = startControllers(cluster.clients, testLog, { retryPeriodMs: 500 });
  t.teardown(() => controllers.stop());
  // The registry is on this node's loopback: the operator lists it, as registries there are refused otherwise.
  await startAgent(t, cluster, { nodeName: NODE, extraArgs: [`--local-registry=${registry.host}`] });
  await testNamespace(t, cluster, NS);
  const tenant = await createTenant(cluster.clients, NS);
  const kubectl = await tenantKubectl(t, cluster, tenant);

  const manifests = Object.fromEntries(
    EXAMPLES.map((name) => [name, readFileSync(join(FIXTURES, `${name}.yaml`), 'utf8').replaceAll('registry:5000/', `${registry.host}/`)]),
  );
  t.same(
    EXAMPLES.map((name) => manifests[name]!.split('\n').filter((l) => l.includes('registry:5000')).length),
    [0, 0, 0, 0],
    'the registry host is the only change',
  );
  for (const name of EXAMPLES) {
    const res = await kubectl(['apply', '-n', NS, '-f', '-'], { input: manifests[name] });
    t.equal(res.code, 0, `kubectl apply -f ${name}.yaml as the tenant: ${res.stderr}`);
  }
  const sata = await kubectl(['apply', '-n', NS, '-f', '-'], { input: sataVm(registry.host) });
  t.equal(sata.code, 0, `kubectl apply of the vm-cirros-sata VM as the tenant: ${sata.stderr}`);

  // vm-cirros says running: false; KubeVirt's docs start it with virtctl start, or this patch.
  await waitFor(virtualMachines(tenant, NS, { name: 'vm-cirros' }), (vm) => vm.status?.printableStatus === 'Stopped', {
    what: 'Stopped (running: false)',
  });
  const started = await kubectl(['patch', 'vm', 'vm-cirros', '-n', NS, '--type', 'merge', '-p', '{"spec":{"running":true}}']);
  t.equal(started.code, 0, `vm-cirros started with kubectl patch as the tenant: ${started.stderr}`);

  const vmiNames = ['vmi-ephemeral', 'vm-cirros', 'vmi-nocloud', 'vmi-kernel-boot', 'vm-cirros-sata'];
  const vmis = await Promise.all(
    vmiNames.map((name) =>
      waitFor(virtualMachineInstances(tenant, NS, { name }), (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
        what: 'Running and Ready',
        deadlineMs: BOOT_DEADLINE_MS,
      }),
    ),
  );
  const byName = new Map(vmis.map((v) => [v.metadata.name!, v]));

  /** The launcher pod of a VMI, read by the tenant. */
  const launcherPod = async (vmi: string) =>
    (await tenant.core.listNamespacedPod({ namespace: NS, labelSelector: `vm.kubevirt.io/name=${vmi}` })).items[0];
  /** The launcher pod's console once it holds every one of `texts`, read with the tenant's kubectl logs. */
  const consoleWith = async (vmi: string, texts: string[]): Promise<string> => {
    const podName = (await launcherPod(vmi))?.metadata?.name ?? '';
    const logs = await poll(
      `${texts.join(', ')} in kubectl logs ${podName}`,
      () => kubectl(['logs', '-n', NS, podName]),
      (r) => r.code === 0 && texts.every((x) => r.stdout.includes(x)),
      { deadlineMs: BOOT_DEADLINE_MS, intervalMs: 1000 },
    );
    return logs.stdout;
  };
  const qemuArgv = (vmi: VirtualMachineInstance): string[] => {
    const [pid] = qemuPidsOf(vmi.spec.domain.firmware?.uuid ?? vmi.metadata.uid!);
    return pid === undefined ? [] : argvOf(pid);
  };

  const consoles = Object.fromEntries(
    await Promise.all(
      vmiNames.map(
        async (name) =>
          [
            name,
            await consoleWith(
              name,
              ['vm-cirros', 'vmi-nocloud', 'vm-cirros-sata'].includes(name) ? [GUEST_BOOT_MARKER, USER_DATA_OUTPUT] : [GUEST_BOOT_MARKER],
            ),
          ] as const,
      ),
    ),
  );
  t.same(
    vmiNames.map((name) => ({
      name,
      unsupported: byName.get(name)?.status?.conditions?.find((c) => c.type === 'UnsupportedFields')?.message,
      booted: consoles[name]!.includes(GUEST_BOOT_MARKER),
      userData: consoles[name]!.includes(USER_DATA_OUTPUT),
    })),
    [
      { name: 'vmi-ephemeral', unsupported: undefined, booted: true, userData: false },
      { name: 'vm-cirros', unsupported: undefined, booted: true, userData: true },
      { name: 'vmi-nocloud', unsupported: undefined, booted: true, userData: true },
      { name: 'vmi-kernel-boot', unsupported: undefined, booted: true, userData: false },
      { name: 'vm-cirros-sata', unsupported: undefined, booted: true, userData: true },
    ],
    'every example runs with each of its fields realized; the guests booted, and the user-data script ran where the example has one',
  );

  const sataArgv = qemuArgv(byName.get('vm-cirros-sata')!).join(' ');
  t.same(
    {
      disks: byName.get('vm-cirros-sata')?.spec.domain.devices?.disks,
      sataDisks: sataArgv.match(/ide-hd/g)?.length ?? 0,
      virtioDisks: sataArgv.match(/virtio-blk/g)?.length ?? 0,
    },
    {
      disks: [
        { name: 'containerdisk', disk: { bus: 'sata' } },
        { name: 'cloudinitdisk', disk: { bus: 'sata' } },
      ],
      sataDisks: 2,
      virtioDisks: 0,
    },
    "vm-cirros-sata's VMI shows a SATA disk per volume, as KubeVirt's defaulting writes them, and QEMU has both on SATA",
  );

  const ephemeral = await launcherPod('vmi-ephemeral');
  await tenant.core.createNamespacedService({
    namespace: NS,
    body: { metadata: { name: 'vmi-ephemeral' }, spec: { selector: { special: 'vmi-ephemeral' }, ports: [{ name: 'ssh', port: 22 }] } },
  });
  // The EndpointSlice controller (kube-controller-manager) writes it; the tenant reads it as `edit` allows.
  const slices = await poll(
    "the Service's EndpointSlice with a ready endpoint",
    () => kubectl(['get', 'endpointslices', '-n', NS, '-l', 'kubernetes.io/service-name=vmi-ephemeral', '-o', 'json']),
    (r) =>
      r.code === 0 &&
      (JSON.parse(r.stdout) as { items: V1EndpointSlice[] }).items.some((e) => e.endpoints?.some((x) => x.conditions?.ready)),
    { deadlineMs: 60_000, intervalMs: 1000 },
  );
  t.same(
    {
      label: ephemeral?.metadata?.labels?.special,
      endpoints: (JSON.parse(slices.stdout) as { items: V1EndpointSlice[] }).items
        .flatMap((e) => e.endpoints ?? [])
        .map((e) => ({ addresses: e.addresses, ready: e.conditions?.ready, pod: e.targetRef?.name })),
    },
    {
      label: 'vmi-ephemeral',
      endpoints: [{ addresses: [ephemeral?.status?.podIP], ready: true, pod: ephemeral?.metadata?.name }],
    },
    "the launcher pod carries the VMI's label, and a Service selecting it has the Ready VM's pod IP as its one ready endpoint",
  );
  t.equal(
    ephemeral?.status?.containerStatuses?.[0]?.imageID,
    `${registry.host}/kubevirt/cirros-container-disk-demo@${diskDigest}`,
    'the containerDisk was pulled from the test registry: its digest is the launcher pod’s imageID',
  );
  const diskArgv = qemuArgv(byName.get('vmi-ephemeral')!);
  const kernelArgv = qemuArgv(byName.get('vmi-kernel-boot')!);
  t.same(
    {
      diskBootsAKernel: diskArgv.includes('-kernel'),
      kernelBoot: kernelArgv.includes('-kernel') && kernelArgv.includes('-initrd'),
      kernelArgs: kernelArgv[kernelArgv.indexOf('-append') + 1],
    },
    { diskBootsAKernel: false, kernelBoot: true, kernelArgs: 'console=ttyS0' },
    "the containerDisk boots through its own boot loader; vmi-kernel-boot boots the image's kernel and initrd with the example's kernelArgs",
  );
});

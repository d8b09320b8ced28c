// Issue 28, instancetypes and preferences, as a tenant (edit in one
// namespace) on a real control plane, the controllers under their shipped
// RBAC, the subresource API and a node agent booting the test guest:
// KubeVirt's common-instancetypes bundles (v1.3.1, test/e2e/fixtures/
// common-instancetypes/) apply unchanged; a u1.nano VM with the alpine
// preference runs with u1.nano's vCPU and memory (QEMU's -smp and -m) and the
// preference's disk bus, that disk on a QEMU iothread of its own (its
// template's ioThreadsPolicy auto and dedicatedIOThread); its status names the ControllerRevision holding
// u1.nano; an edit of u1.nano leaves the running VM, its revision and its next
// start untouched; a VM written by `virtctl create vm` runs as printed;
// `virtctl expand` returns the expanded VM; a template that sets the vCPUs
// beside an instancetype is refused at admission naming the field; an
// instancetype asking for dedicated CPUs refuses the VM naming the field; and
// another namespace's instancetype is out of the tenant's reach.
import { join } from 'node:path';
import t from 'tap';
import { TEST_GUEST_IMAGE } from '../../provider/images/test-guest-images.js';
import type { VirtualMachine, VirtualMachineInstance } from '../../provider/kubevirt/types.js';
import { isNotFound } from '../../provider/kube/errors.js';
import { packageRoot } from '../../provider/package-root.js';
import { argvOf } from '../helpers/processes.js';
import { ensureVirtctl, runVirtctl } from '../helpers/virtctl.js';
import {
  condition,
  controllersIdentity,
  createTenant,
  kubeconfigFile,
  qemuPidsOf,
  startAgent,
  startSubresourcesAndControllers,
  startTestCluster,
  tenantKubectl,
  testNamespace,
  virtualMachineInstances,
  virtualMachines,
  waitFor,
} from './framework/index.js';

const NODE = 'vkvm-e2e-itypes';
const NS = 'e2e-instancetypes';
const OTHER_NS = 'e2e-instancetypes-other';
const BOOT_DEADLINE_MS = 240_000;
const FIXTURES = join(packageRoot(), 'test', 'e2e', 'fixtures', 'common-instancetypes');
const BUNDLES = ['common-clusterinstancetypes-bundle-v1.3.1.yaml', 'common-clusterpreferences-bundle-v1.3.1.yaml'];

/** A VM with only a containerDisk of the test guest (no disk entry: defaulting gives it one), naming an instancetype. */
const vmNaming = (name: string, instancetype: object, extra: { preference?: object; domain?: object; runStrategy?: string } = {}) => `
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: { name: ${name} }
spec:
  runStrategy: ${extra.runStrategy ?? 'Always'}
  instancetype: ${JSON.stringify(instancetype)}
  ${extra.preference ? `preference: ${JSON.stringify(extra.preference)}` : ''}
  template:
    spec:
      domain: ${JSON.stringify({ devices: {}, ...(extra.domain ?? {}) })}
      terminationGracePeriodSeconds: 0
      volumes:
        - name: containerdisk
          containerDisk: { image: ${TEST_GUEST_IMAGE} }
`;

/** The iothread objects of a VMI's QEMU, and the iothread of each virtio-blk device, by disk name. */
function qemuIoThreads(vmi: VirtualMachineInstance): { objects: string[]; disks: string[][] } {
  const [pid] = qemuPidsOf(vmi.spec.domain.firmware?.uuid ?? vmi.metadata.uid!);
  const argv = (pid === undefined ? [] : argvOf(pid)).join(' ');
  return {
    objects: [...argv.matchAll(/"qom-type":"iothread","id":"(\w+)"/g)].map((m) => m[1]!),
    disks: [...argv.matchAll(/"driver":"virtio-blk-pci"[^}]*"iothread":"(\w+)"[^}]*"id":"ua-disk-([\w-]+)"/g)].map((m) => [m[2]!, m[1]!]),
  };
}

/** QEMU's -smp and -m of a VMI's QEMU (memory in MiB). */
function qemuSize(vmi: VirtualMachineInstance): { smp: string | undefined; memoryMiB: number | undefined } {
  const [pid] = qemuPidsOf(vmi.spec.domain.firmware?.uuid ?? vmi.metadata.uid!);
  const argv = pid === undefined ? [] : argvOf(pid);
  const m = /^(?:size=)?(\d+)(k|M)?/.exec(argv[argv.indexOf('-m') + 1] ?? '');
  return {
    smp: argv.includes('-smp') ? argv[argv.indexOf('-smp') + 1] : undefined,
    memoryMiB: m ? (m[2] === 'k' ? Number(m[1]) / 1024 : Number(m[1])) : undefined,
  };
}

t.test('instancetypes and preferences: common-instancetypes applied unchanged, expanded into VMs as KubeVirt does', async (t) => {
  const virtctlBin = await ensureVirtctl();
  const cluster = await startTestCluster(t);
  await startSubresourcesAndControllers(t, cluster, await controllersIdentity(cluster));
  await startAgent(t, cluster, { nodeName: NODE });
  await testNamespace(t, cluster, NS);
  const other = await testNamespace(t, cluster, OTHER_NS);
  const tenant = await createTenant(cluster.clients, NS);
  const kubectl = await tenantKubectl(t, cluster, tenant);
  const tenantConfig = await kubeconfigFile(t, tenant);
  const virtctl = (args: string[]) => runVirtctl(virtctlBin, [`--kubeconfig=${tenantConfig}`, `--namespace=${NS}`, ...args]);
  const vm = (name: string) => virtualMachines(tenant, NS, { name });
  const vmi = (name: string) => virtualMachineInstances(tenant, NS, { name });

  for (const bundle of BUNDLES) {
    const applied = await cluster.kubectl(['apply', '-f', join(FIXTURES, bundle)]);
    t.equal(applied.code, 0, `the admin applies ${bundle} unchanged: ${applied.stderr}`);
  }
  const listed = await kubectl(['get', 'virtualmachineclusterinstancetypes,virtualmachineclusterpreferences', '-o', 'name']);
  const names = listed.stdout.split('\n').filter(Boolean);
  t.match(
    {
      code: listed.code,
      u1: names.filter((n) => /instancetype.*\/u1\./.test(n)).length,
      o1: names.filter((n) => /instancetype.*\/o1\./.test(n)).length,
      cx1: names.filter((n) => /instancetype.*\/cx1\./.test(n)).length,
      preferences: ['alpine', 'cirros', 'fedora', 'ubuntu', 'windows.11'].filter((p) =>
        names.some((n) => n.endsWith(`preference.instancetype.kubevirt.io/${p}`)),
      ),
    },
    { code: 0, u1: 10, o1: 9, cx1: 6, preferences: ['alpine', 'cirros', 'fedora', 'ubuntu', 'windows.11'] },
    'the tenant reads the cluster-wide instancetypes and preferences (u1, o1, cx1 series, OS preferences), as every authenticated user may',
  );

  // Started together: two small guests boot side by side.
  const applyNano = await kubectl(['apply', '-n', NS, '-f', '-'], {
    // KubeVirt's iothreads on the way: ioThreadsPolicy auto, and the disk (on the preference's virtio bus) on its own thread.
    input: vmNaming(
      'nano',
      { name: 'u1.nano', kind: 'VirtualMachineClusterInstancetype' },
      {
        preference: { name: 'alpine' },
        domain: { ioThreadsPolicy: 'auto', devices: { disks: [{ name: 'containerdisk', dedicatedIOThread: true }] } },
      },
    ),
  });
  t.equal(applyNano.code, 0, `the tenant applies a u1.nano VM with the alpine preference: ${applyNano.stderr}`);
  const created = await virtctl([
    'create',
    'vm',
    '--name=created',
    '--instancetype=u1.nano',
    '--preference=cirros',
    `--volume-containerdisk=src:${TEST_GUEST_IMAGE}`,
  ]);
  t.equal(created.code, 0, `virtctl create vm prints a VM: ${created.stderr}`);
  const applyCreated = await kubectl(['apply', '-n', NS, '-f', '-'], { input: created.stdout });
  t.equal(applyCreated.code, 0, `the tenant applies it as printed: ${applyCreated.stderr}`);

  const [nano, createdVmi] = await Promise.all(
    ['nano', 'created'].map((name) =>
      waitFor(vmi(name), (v) => v.status?.phase === 'Running' && condition(v, 'Ready') === 'True', {
        what: `${name} Running and Ready`,
        deadlineMs: BOOT_DEADLINE_MS,
      }),
    ),
  );
  const nanoVm = await waitFor(vm('nano'), (v) => Boolean(v.status?.instancetypeRef?.controllerRevisionRef?.name), {
    what: 'refs in status',
  });
  const revisionName = nanoVm.status!.instancetypeRef!.controllerRevisionRef!.name!;
  const readRevision = async (name: string) =>
    JSON.parse((await kubectl(['get', 'controllerrevision', name, '-n', NS, '-o', 'json'])).stdout) as { data: { spec: unknown } };
  const revision = await readRevision(revisionName);
  t.match(
    {
      vmi: nano!.spec.domain,
      qemu: qemuSize(nano!),
      iothreads: qemuIoThreads(nano!),
      status: nanoVm.status,
      revision: revision.data,
      annotations: nano!.metadata.annotations,
    },
    {
      vmi: {
        cpu: { sockets: 1, cores: 1, threads: 1 },
        memory: { guest: '512Mi' },
        ioThreadsPolicy: 'auto',
        devices: { disks: [{ name: 'containerdisk', disk: { bus: 'virtio' }, dedicatedIOThread: true }] },
      },
      qemu: { smp: /^1\b/, memoryMiB: 512 },
      iothreads: { objects: ['iothread1'], disks: [['containerdisk', 'iothread1']] },
      status: {
        instancetypeRef: {
          name: 'u1.nano',
          kind: 'VirtualMachineClusterInstancetype',
          controllerRevisionRef: { name: /^nano-u1\.nano-v1beta1-/ },
        },
        preferenceRef: { name: 'alpine', controllerRevisionRef: { name: /^nano-alpine-v1beta1-/ } },
      },
      revision: {
        apiVersion: 'instancetype.kubevirt.io/v1beta1',
        kind: 'VirtualMachineClusterInstancetype',
        spec: { cpu: { guest: 1 }, memory: { guest: '512Mi' } },
      },
      annotations: {
        'kubevirt.io/cluster-instancetype-name': 'u1.nano',
        'kubevirt.io/cluster-preference-name': 'alpine',
        'vm.kubevirt.io/os': 'linux',
      },
    },
    "the u1.nano VM runs with u1.nano's 1 vCPU and 512Mi (QEMU's -smp and -m), the preference's virtio disk on its own iothread (ioThreadsPolicy auto, dedicatedIOThread), and its status names the revision",
  );
  t.match(
    { vmi: createdVmi!.spec.domain, qemu: qemuSize(createdVmi!) },
    { vmi: { cpu: { sockets: 1 }, memory: { guest: '512Mi' } }, qemu: { memoryMiB: 512 } },
    'the VM virtctl create vm printed runs with u1.nano too',
  );

  const expanded = await virtctl(['expand', '--vm', 'nano', '--output', 'json']);
  t.match(
    { code: expanded.code, vm: expanded.code === 0 ? (JSON.parse(expanded.stdout) as VirtualMachine) : expanded.stderr },
    {
      code: 0,
      vm: {
        spec: {
          instancetype: undefined,
          preference: undefined,
          template: { spec: { domain: { cpu: { sockets: 1 }, memory: { guest: '512Mi' } } } },
        },
        status: { instancetypeRef: undefined },
      },
    },
    'virtctl expand returns the VM with u1.nano and alpine expanded into its template',
  );

  // The admin edits u1.nano; the VM stays pinned to its revision.
  const edited = await cluster.kubectl([
    'patch',
    'virtualmachineclusterinstancetype',
    'u1.nano',
    '--type=merge',
    '-p',
    '{"spec":{"cpu":{"guest":2},"memory":{"guest":"1Gi"}}}',
  ]);
  t.equal(edited.code, 0, `the admin edits u1.nano: ${edited.stderr}`);
  const restart = await virtctl(['restart', 'nano']);
  t.equal(restart.code, 0, `virtctl restart nano: ${restart.stderr}`);
  const next = await waitFor(vmi('nano'), (v) => v.metadata.uid !== nano!.metadata.uid, {
    what: 'a new VMI after the restart',
    deadlineMs: 120_000,
  });
  const afterVm = await waitFor(vm('nano'), () => true);
  t.match(
    {
      next: next.spec.domain,
      ref: afterVm.status?.instancetypeRef?.controllerRevisionRef?.name,
      revision: (await readRevision(revisionName)).data.spec,
    },
    {
      next: { cpu: { sockets: 1, cores: 1, threads: 1 }, memory: { guest: '512Mi' } },
      ref: revisionName,
      revision: { cpu: { guest: 1 }, memory: { guest: '512Mi' } },
    },
    "an edit of u1.nano changes neither the VM's revision nor what its next start runs",
  );
  const rerun = await waitFor(vmi('nano'), (v) => v.metadata.uid !== nano!.metadata.uid && v.status?.phase === 'Running', {
    what: 'the restarted VMI Running',
    deadlineMs: BOOT_DEADLINE_MS,
  });
  t.match(qemuSize(rerun), { smp: /^1\b/, memoryMiB: 512 }, "the restarted VM's QEMU still has u1.nano's size as its revision holds it");

  const conflicting = await kubectl(['apply', '-n', NS, '-f', '-'], {
    input: vmNaming('conflict', { name: 'u1.nano' }, { domain: { cpu: { sockets: 2 } }, runStrategy: 'Halted' }),
  });
  t.match(
    conflicting,
    {
      code: 1,
      stderr:
        /spec\.template\.spec\.domain\.cpu\.sockets: Invalid value: .*VM field\(s\) spec\.template\.spec\.domain\.cpu\.sockets conflicts with selected instance type/,
    },
    'a template setting sockets beside an instancetype is refused at admission, naming the field',
  );

  // Another namespace's instancetype, and the cx1 series vkvm cannot give.
  const privateType = await other.kubectl(['apply', '-f', '-'], {
    input:
      'apiVersion: instancetype.kubevirt.io/v1beta1\nkind: VirtualMachineInstancetype\nmetadata: { name: private }\nspec: { cpu: { guest: 1 }, memory: { guest: 256Mi } }\n',
  });
  t.equal(privateType.code, 0, `the admin makes an instancetype in ${OTHER_NS}: ${privateType.stderr}`);
  t.match(
    await kubectl(['get', 'virtualmachineinstancetype', 'private', '-n', OTHER_NS]),
    { code: 1, stderr: /forbidden/ },
    "the tenant cannot read another namespace's instancetype",
  );
  for (const [name, matcher] of [
    ['elsewhere', { name: 'private', kind: 'VirtualMachineInstancetype' }],
    ['dedicated', { name: 'cx1.medium' }],
  ] as const) {
    const r = await kubectl(['apply', '-n', NS, '-f', '-'], { input: vmNaming(name, matcher) });
    t.equal(r.code, 0, `${name}: ${r.stderr}`);
  }
  const refused = await Promise.all(
    ['elsewhere', 'dedicated'].map((name) => waitFor(vm(name), (v) => condition(v, 'Failure') === 'True', { what: `${name} refused` })),
  );
  const vmiOf = (name: string) =>
    tenant.custom
      .getNamespacedCustomObject({ group: 'kubevirt.io', version: 'v1', namespace: NS, plural: 'virtualmachineinstances', name })
      .then(
        () => 'exists',
        (err: unknown) => (isNotFound(err) ? 'none' : String(err)),
      );
  t.match(
    {
      messages: refused.map((v) => v.status?.conditions?.find((c) => c.type === 'Failure')?.message),
      vmis: [await vmiOf('elsewhere'), await vmiOf('dedicated')],
    },
    {
      messages: [
        `spec.instancetype: VirtualMachineInstancetype private not found in namespace ${NS}`,
        /^spec\.instancetype: VirtualMachineClusterInstancetype cx1\.medium asks for what vkvm does not provide: spec\.cpu\.dedicatedCPUPlacement, spec\.cpu\.isolateEmulatorThread, spec\.cpu\.numa, spec\.memory\.hugepages/,
      ],
      vmis: ['none', 'none'],
    },
    "a VM naming another namespace's instancetype finds none in its own; one naming cx1 is refused naming what vkvm lacks; neither gets a VMI",
  );
});

// The kubevirt.io/v1 CRDs on the real control plane, installed the way `vkvm
// up` installs them: KubeVirt's quickstart VM is accepted and what vkvm does
// not type survives a round trip, `kubectl get vm/vmi` print KubeVirt's
// columns, and manifests KubeVirt's webhook would refuse are refused here,
// with the field named, and leave nothing behind.
import t from 'tap';
import { virtualMachineCrd, virtualMachineInstanceCrd, type CustomResourceDefinition } from '../../crds/kubevirt.js';
import { installClusterManifests } from '../../provider/cli/up.js';
import { loadKubeConfig, makeClients } from '../../provider/kube/client.js';
import { servesDataVolumes } from '../../provider/controllers/datavolumes/datavolumes.js';
import {
  quickstartVm,
  quickstartVmi,
  startTestCluster,
  testNamespace,
  type Manifest,
  type TestCluster,
  type VmManifest,
} from './framework/index.js';

const NS = 'e2e-crds';
const testVm = (name: string): VmManifest => quickstartVm(name, NS);
const testVmi = (name: string) => quickstartVmi(name, NS);

async function apply(cluster: TestCluster, manifest: object) {
  return cluster.kubectl(['apply', '-f', '-'], { input: JSON.stringify(manifest) });
}

async function getJson<T>(cluster: TestCluster, args: string[]): Promise<T> {
  const r = await cluster.kubectl(['get', ...args, '-o', 'json']);
  if (r.code !== 0) throw new Error(`kubectl get ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

/** The header line of `kubectl get` as its column names. */
const headerOf = (stdout: string) => stdout.split('\n')[0]!.trim().split(/\s+/);

t.test('kubevirt.io/v1 CRDs as vkvm up installs them', async (t) => {
  const cluster = await startTestCluster(t);
  await installClusterManifests(cluster.kubeconfigPath);
  const established = await cluster.kubectl([
    'wait',
    '--for=condition=Established',
    '--timeout=60s',
    'crd/virtualmachines.kubevirt.io',
    'crd/virtualmachineinstances.kubevirt.io',
  ]);
  t.same({ code: established.code, stderr: established.stderr }, { code: 0, stderr: '' }, 'both CRDs are accepted and established');
  for (const crd of [virtualMachineCrd(), virtualMachineInstanceCrd()]) {
    const stored = await getJson<CustomResourceDefinition>(cluster, ['crd', crd.metadata.name]);
    t.same(stored.spec.versions, crd.spec.versions, `${crd.metadata.name} is stored as generated: no field lost on the way`);
  }
  await testNamespace(t, cluster, NS);
  t.match(await cluster.clients.core.readNamespace({ name: NS }), { status: { phase: 'Active' } }, `namespace ${NS} created`);

  await t.test('manifests KubeVirt refuses are refused with the field named, and nothing is created', async (t) => {
    const vmSpec = (vm: VmManifest) => vm.spec.template.spec;
    const cases: Array<{ name: string; manifest: Manifest; stderr: RegExp }> = [];
    const add = <M extends Manifest>(name: string, manifest: M, edit: (m: M) => void, stderr: RegExp) => {
      edit(manifest);
      cases.push({ name, manifest, stderr });
    };
    add(
      'VM without memory',
      testVm('no-memory'),
      (vm) => delete vmSpec(vm).domain.resources,
      /spec\.template\.spec\.domain\.resources\.requests\[memory\]: Required value: no memory requested: set spec\.template\.spec\.domain\.resources\.requests\.memory/,
    );
    add(
      'VMI without memory',
      testVmi('no-memory'),
      (vmi) => delete vmi.spec.domain.resources,
      /spec\.domain\.resources\.requests\[memory\]: Required value: no memory requested: set spec\.domain\.resources\.requests\.memory/,
    );
    add(
      'VM disk naming no volume',
      testVm('unknown-volume'),
      (vm) => vmSpec(vm).domain.devices.disks.push({ name: 'missing', disk: { bus: 'virtio' } }),
      /spec\.template\.spec\.domain\.devices\.disks: Invalid value: .*every disk must name a volume in spec\.template\.spec\.volumes/,
    );
    add(
      'VMI disk naming no volume',
      testVmi('unknown-volume'),
      (vmi) => vmi.spec.domain.devices.disks.push({ name: 'missing', disk: { bus: 'virtio' } }),
      /spec\.domain\.devices\.disks: Invalid value: .*every disk must name a volume in spec\.volumes/,
    );
    add(
      'two disks with one bootOrder',
      testVm('duplicate-boot-order'),
      (vm) => {
        const [a, b] = vmSpec(vm).domain.devices.disks;
        a!.bootOrder = 1;
        b!.bootOrder = 1;
      },
      /spec\.template\.spec\.domain\.devices\.disks: Invalid value: .*same bootOrder/,
    );
    add(
      'disk bus ide',
      testVm('ide-bus'),
      (vm) => (vmSpec(vm).domain.devices.disks[0]!.disk!.bus = 'ide'),
      /spec\.template\.spec\.domain\.devices\.disks\[0\]\.disk\.bus: Unsupported value: "ide": supported values: "virtio", "sata", "scsi"/,
    );
    add(
      'runStrategy with running',
      testVm('run-strategy-and-running'),
      (vm) => (vm.spec.running = true),
      /spec\.running: Invalid value: .*spec\.running and spec\.runStrategy are mutually exclusive/,
    );
    add(
      'CD-ROM on virtio',
      testVmi('virtio-cdrom'),
      (vmi) => (vmi.spec.domain.devices.disks[1] = { name: 'cloudinitdisk', cdrom: { bus: 'virtio' } }),
      /spec\.domain\.devices\.disks\[1\]\.cdrom\.bus: Unsupported value: "virtio": supported values: "sata", "scsi"/,
    );
    add(
      'evictionStrategy none of the four vkvm realizes',
      testVm('eviction-strategy'),
      (vm) => Object.assign(vmSpec(vm), { evictionStrategy: 'Migrate' }),
      /spec\.template\.spec\.evictionStrategy: Unsupported value: "Migrate": supported values: "None", "LiveMigrate", "LiveMigrateIfPossible", "External"/,
    );
    add(
      'clock with utc and timezone',
      testVm('two-clocks'),
      (vm) => (vmSpec(vm).domain.clock = { utc: {}, timezone: 'Europe/Paris' }),
      /spec\.template\.spec\.domain\.clock: Invalid value: .*set utc or timezone, not both/,
    );

    for (const c of cases) {
      const r = await apply(cluster, c.manifest);
      t.match(
        { rejected: r.code !== 0, stderr: r.stderr },
        { rejected: true, stderr: c.stderr },
        `${c.name}: kubectl apply fails naming the field`,
      );
    }
    const all = await cluster.kubectl(['get', 'vm,vmi', '-A']);
    t.match(
      { code: all.code, stdout: all.stdout, stderr: all.stderr },
      { code: 0, stdout: '', stderr: /No resources found/ },
      'no VM or VMI exists',
    );
  });

  await t.test("KubeVirt's quickstart VM is accepted and fields vkvm does not type survive a round trip", async (t) => {
    const r = await apply(cluster, testVm('testvm'));
    t.match(
      { code: r.code, stdout: r.stdout, stderr: r.stderr },
      { code: 0, stdout: /virtualmachine\.kubevirt\.io\/testvm created/ },
      'kubectl apply creates the VM',
    );
    const stored = await getJson<{ spec: unknown }>(cluster, ['vm', 'testvm', '-n', NS]);
    t.match(
      stored.spec,
      {
        runStrategy: 'Always',
        template: {
          metadata: { labels: { 'kubevirt.io/size': 'small', 'kubevirt.io/domain': 'testvm' } },
          spec: {
            domain: {
              devices: {
                disks: [
                  { name: 'containerdisk', disk: { bus: 'virtio' } },
                  { name: 'cloudinitdisk', disk: { bus: 'virtio' } },
                  { name: 'scratch', disk: { bus: 'virtio' }, cache: 'none' },
                ],
                interfaces: [{ name: 'default', masquerade: {}, model: 'virtio' }],
                gpus: [{ name: 'gpu1', deviceName: 'nvidia.com/GP102GL_Tesla_P40' }],
              },
              features: { smm: { enabled: true } },
              resources: { requests: { memory: '64M' } },
            },
            evictionStrategy: 'LiveMigrate',
            networks: [{ name: 'default', pod: {} }],
            volumes: [
              { name: 'containerdisk', containerDisk: { image: 'quay.io/kubevirt/cirros-container-disk-demo' } },
              { name: 'cloudinitdisk', cloudInitNoCloud: { userDataBase64: 'SGkuXG4=' } },
              { name: 'scratch', emptyDisk: { capacity: '1Gi' } },
            ],
          },
        },
      },
      'kubectl get -o json returns the spec as applied, untyped fields included',
    );

    const vmi = await apply(cluster, testVmi('testvmi'));
    t.match(
      { code: vmi.code, stdout: vmi.stdout, stderr: vmi.stderr },
      { code: 0, stdout: /virtualmachineinstance\.kubevirt\.io\/testvmi created/ },
      'kubectl apply creates its template as a VMI',
    );
    const storedVmi = await getJson<{ spec: unknown }>(cluster, ['vmi', 'testvmi', '-n', NS]);
    t.match(
      storedVmi.spec,
      { domain: { devices: { gpus: [{ name: 'gpu1' }] }, features: { smm: { enabled: true } } }, evictionStrategy: 'LiveMigrate' },
      'VMI keeps them too',
    );
  });

  await t.test('memory from limits, from memory.guest or from an instancetype is enough', async (t) => {
    const variants: Array<[string, (vm: VmManifest) => void]> = [
      ['memory-limit', (vm) => (vm.spec.template.spec.domain.resources = { limits: { memory: '64Mi' } })],
      [
        'memory-guest',
        (vm) => {
          delete vm.spec.template.spec.domain.resources;
          vm.spec.template.spec.domain.memory = { guest: '128Mi' };
        },
      ],
      [
        'memory-instancetype',
        (vm) => {
          delete vm.spec.template.spec.domain.resources;
          vm.spec.instancetype = { name: 'u1.small' };
        },
      ],
    ];
    const results: Record<string, number> = {};
    for (const [name, edit] of variants) {
      const vm = testVm(name);
      edit(vm);
      results[name] = (await apply(cluster, vm)).code;
    }
    t.same(results, { 'memory-limit': 0, 'memory-guest': 0, 'memory-instancetype': 0 }, 'each is accepted');
    await cluster.kubectl(['delete', 'vm', '-n', NS, ...Object.keys(results)]);
  });

  await t.test('kubectl get vm and vmi print the KubeVirt columns, filled from status', async (t) => {
    const vmStatus = { printableStatus: 'Running', ready: true, conditions: [{ type: 'Ready', status: 'True', lastProbeTime: null }] };
    const vmiStatus = {
      phase: 'Running',
      nodeName: 'vkvm-node',
      interfaces: [{ name: 'default', ipAddress: '10.0.2.2', mac: '52:54:00:00:00:01' }],
      conditions: [{ type: 'Ready', status: 'True', lastProbeTime: null }],
    };
    for (const [resource, name, status] of [
      ['vm', 'testvm', vmStatus],
      ['vmi', 'testvmi', vmiStatus],
    ] as const) {
      const r = await cluster.kubectl([
        'patch',
        resource,
        name,
        '-n',
        NS,
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status }),
      ]);
      t.same(
        { code: r.code, stderr: r.stderr },
        { code: 0, stderr: '' },
        `status of ${resource}/${name} written through the status subresource`,
      );
    }
    const vms = await cluster.kubectl(['get', 'vm', '-n', NS]);
    const vmis = await cluster.kubectl(['get', 'vmi', '-n', NS]);
    const wide = await cluster.kubectl(['get', 'vmi', '-n', NS, '-o', 'wide']);
    t.same(
      {
        vm: headerOf(vms.stdout),
        vmRow: vms.stdout
          .split('\n')[1]
          ?.trim()
          .split(/\s+/)
          .filter((_, i) => i !== 1),
        vmi: headerOf(vmis.stdout),
        vmiRow: vmis.stdout
          .split('\n')[1]
          ?.trim()
          .split(/\s+/)
          .filter((_, i) => i !== 1),
        vmiWide: headerOf(wide.stdout),
      },
      {
        vm: ['NAME', 'AGE', 'STATUS', 'READY'],
        vmRow: ['testvm', 'Running', 'True'],
        vmi: ['NAME', 'AGE', 'PHASE', 'IP', 'NODENAME', 'READY'],
        vmiRow: ['testvmi', 'Running', '10.0.2.2', 'vkvm-node', 'True'],
        vmiWide: ['NAME', 'AGE', 'PHASE', 'IP', 'NODENAME', 'READY', 'LIVE-MIGRATABLE', 'PAUSED'],
      },
      'columns and values as KubeVirt prints them (age left out)',
    );
    const names = async (what: string) => (await cluster.kubectl(['get', what, '-n', NS, '-o', 'name'])).stdout.trim().split('\n').sort();
    t.same(
      { all: await names('all'), shortNames: await names('vms,vmis') },
      {
        all: ['virtualmachine.kubevirt.io/testvm', 'virtualmachineinstance.kubevirt.io/testvmi'],
        shortNames: ['virtualmachine.kubevirt.io/testvm', 'virtualmachineinstance.kubevirt.io/testvmi'],
      },
      'both are in the "all" category and answer to the plural short names',
    );
  });

  await t.test("CRDs another installer owns (KubeVirt's virt-operator) are refused, not replaced", async (t) => {
    const crd = 'virtualmachines.kubevirt.io';
    const label = async () =>
      (await cluster.kubectl(['get', 'crd', crd, '-o', 'jsonpath={.metadata.labels.app\\.kubernetes\\.io/part-of}'])).stdout;
    await cluster.kubectl(['label', 'crd', crd, 'app.kubernetes.io/part-of=kubevirt', '--overwrite']);
    t.teardown(() => cluster.kubectl(['label', 'crd', crd, 'app.kubernetes.io/part-of=vkvm', '--overwrite']));
    await t.rejects(installClusterManifests(cluster.kubeconfigPath), {
      message:
        /^customresourcedefinitions\/virtualmachines\.kubevirt\.io exists and is not vkvm's \(app\.kubernetes\.io\/part-of: kubevirt\)/,
    });
    t.equal(await label(), 'kubevirt', 'the foreign CRD was left as it was');
  });

  await t.test("CDI's DataVolume CRD is left to CDI: not replaced, and vkvm's DataVolume controller stays idle", async (t) => {
    const crd = 'datavolumes.cdi.kubevirt.io';
    const clients = makeClients(loadKubeConfig(cluster.kubeconfigPath));
    const get = async (path: string) => (await cluster.kubectl(['get', 'crd', crd, '-o', `jsonpath={${path}}`])).stdout;
    t.equal(await servesDataVolumes(clients), true, 'vkvm installed it, and serves DataVolumes');
    await cluster.kubectl(['label', 'crd', crd, 'app.kubernetes.io/part-of=containerized-data-importer', '--overwrite']);
    t.teardown(() => cluster.kubectl(['label', 'crd', crd, 'app.kubernetes.io/part-of=vkvm', '--overwrite']));
    // As CDI's schema would differ from vkvm's: a column vkvm's has not.
    await cluster.kubectl([
      'patch',
      'crd',
      crd,
      '--type=json',
      '-p',
      JSON.stringify([
        {
          op: 'add',
          path: '/spec/versions/0/additionalPrinterColumns/-',
          value: { name: 'CDI', type: 'string', jsonPath: '.spec.contentType' },
        },
      ]),
    ]);
    const generation = await get('.metadata.generation');
    await installClusterManifests(cluster.kubeconfigPath);
    t.same(
      {
        partOf: await get('.metadata.labels.app\\.kubernetes\\.io/part-of'),
        generation: await get('.metadata.generation'),
        serves: await servesDataVolumes(clients),
      },
      { partOf: 'containerized-data-importer', generation, serves: false },
      'vkvm up applies everything else and leaves the foreign DataVolume CRD as it was; its controller would not run',
    );
  });
});

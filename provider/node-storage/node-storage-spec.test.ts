import t from 'tap';
import { join } from 'node:path';
import { readManifests } from '../kube/apply.js';
import { packageRoot } from '../package-root.js';
import { SNAPSHOT_CONTROLLER_USER, snapshotControllerCommand } from '../cluster-services/snapshot-controller.js';
import { RESIZER_USER, resizerCommand } from '../cluster-services/resizer.js';
import {
  driverArgs,
  nodeStoragePaths,
  provisionerCommand,
  provisionerSubject,
  snapshotterCommand,
  type NodeStorageSpec,
} from './node-storage-spec.js';

const spec: NodeStorageSpec = {
  nodeName: 'box-2',
  stateDir: '/var/lib/vkvm/nodes/2',
  runDir: '/run/vkvm/nodes/2',
  provisionerBinary: '/var/cache/vkvm/cluster/abc/csi-provisioner',
  snapshotterBinary: '/var/cache/vkvm/cluster/abc/csi-snapshotter',
  logLevel: 'info',
};

t.test("a node's volumes and credentials live under its state dir, its socket under its run dir", async (t) => {
  t.same(nodeStoragePaths(spec), {
    csiDir: '/var/lib/vkvm/nodes/2/csi',
    socket: '/run/vkvm/nodes/2/csi/csi.sock',
    dir: '/var/lib/vkvm/nodes/2/csi-sidecars',
    kubeconfig: '/var/lib/vkvm/nodes/2/csi-sidecars/provisioner.kubeconfig',
    pem: '/var/lib/vkvm/nodes/2/csi-sidecars/provisioner.pem',
  });
});

t.test(
  "the driver serves the node by its name on its socket, expands on the node, and registers in that node's agent's plugin registry",
  async (t) => {
    t.same(driverArgs(spec, nodeStoragePaths(spec)), [
      'csi',
      '--csi-dir=/var/lib/vkvm/nodes/2/csi',
      '--socket=/run/vkvm/nodes/2/csi/csi.sock',
      '--node-id=box-2',
      '--log-level=info',
      '--expansion=node',
      '--registration-socket=/var/lib/vkvm/nodes/2/plugins_registry/csi.vkvm.io-reg.sock',
    ]);
    t.match(
      driverArgs({ ...spec, stateDir: '/var/lib/vkvm' }, nodeStoragePaths(spec)),
      [
        'csi',
        String,
        String,
        String,
        String,
        '--expansion=node',
        '--registration-socket=/var/lib/kubelet/plugins_registry/csi.vkvm.io-reg.sock',
      ],
      "the host's one agent with the default state dir: the kubelet's registry",
    );
  },
);

t.test("the provisioner is the node's: node deployment, topology, capacity owned by nothing, its own kubeconfig", async (t) => {
  for (const [logLevel, verbosity] of [
    ['info', '--v=2'],
    ['debug', '--v=5'],
  ] as const) {
    t.same(
      provisionerCommand({ ...spec, logLevel }, nodeStoragePaths(spec)),
      {
        argv: [
          '/var/cache/vkvm/cluster/abc/csi-provisioner',
          '--csi-address=/run/vkvm/nodes/2/csi/csi.sock',
          '--kubeconfig=/var/lib/vkvm/nodes/2/csi-sidecars/provisioner.kubeconfig',
          '--node-deployment',
          '--feature-gates=Topology=true',
          '--enable-capacity',
          '--capacity-ownerref-level=-1',
          '--node-deployment-immediate-binding=false',
          verbosity,
        ],
        env: { NODE_NAME: 'box-2', NAMESPACE: 'kube-system' },
      },
      `log level ${logLevel}`,
    );
  }
});

t.test("deploy/csi.yaml binds the provisioners' group to the upstream rules, and makes vkvm-local the default class", async (t) => {
  const objects = await readManifests(join(packageRoot(), 'deploy', 'csi.yaml'));
  const byKind = (kind: string) => objects.filter((o) => o.kind === kind);
  t.match(byKind('CSIDriver'), [
    {
      metadata: { name: 'csi.vkvm.io' },
      spec: { attachRequired: false, podInfoOnMount: false, volumeLifecycleModes: ['Persistent'], storageCapacity: true },
    },
  ]);
  t.match(byKind('StorageClass'), [
    {
      metadata: { name: 'vkvm-local', annotations: { 'storageclass.kubernetes.io/is-default-class': 'true' } },
      provisioner: 'csi.vkvm.io',
      volumeBindingMode: 'WaitForFirstConsumer',
      allowVolumeExpansion: true,
    },
  ]);
  const group = provisionerSubject('box-2').organizations[0];
  const subjectsOf = (kind: string, name: string) =>
    (objects.find((o) => o.kind === kind && o.metadata?.name === name) as unknown as { subjects: unknown[] } | undefined)?.subjects;
  for (const [kind, name] of [
    ['ClusterRoleBinding', 'vkvm:csi-provisioner'],
    ['RoleBinding', 'vkvm:csi-provisioner'],
    ['ClusterRoleBinding', 'vkvm:csi-snapshotter'],
  ] as const)
    t.same(
      subjectsOf(kind, name),
      [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: group }],
      `${kind} ${name} names the sidecars' group`,
    );
  t.same(
    subjectsOf('ClusterRoleBinding', 'vkvm:snapshot-controller'),
    [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: SNAPSHOT_CONTROLLER_USER }],
    'the snapshot controller is a user of its own',
  );
  t.same(
    subjectsOf('ClusterRoleBinding', 'vkvm:csi-resizer'),
    [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: RESIZER_USER }],
    'the resizer is a user of its own',
  );
  t.match(byKind('Role'), [{ metadata: { namespace: 'kube-system' }, rules: [{ resources: ['csistoragecapacities'] }] }]);
  t.equal((byKind('Role')[0] as unknown as { rules: unknown[] }).rules.length, 1, 'and nothing else in kube-system');
});

t.test('deploy/csi.yaml: a default VolumeSnapshotClass, and tenants snapshot their claims but touch no content or class', async (t) => {
  const objects = await readManifests(join(packageRoot(), 'deploy', 'csi.yaml'));
  t.match(
    objects.filter((o) => o.kind === 'VolumeSnapshotClass'),
    [
      {
        metadata: { name: 'vkvm-local', annotations: { 'snapshot.storage.kubernetes.io/is-default-class': 'true' } },
        driver: 'csi.vkvm.io',
        deletionPolicy: 'Delete',
      },
    ],
  );
  type Role = { metadata: { name: string; labels?: Record<string, string> }; rules: Array<{ apiGroups: string[]; resources: string[] }> };
  const aggregated = (objects as unknown as Role[]).filter((o) =>
    Object.keys(o.metadata.labels ?? {}).some((l) => l.startsWith('rbac.authorization.k8s.io/aggregate-to-')),
  );
  t.same(
    aggregated.map((r) => [r.metadata.name, Object.keys(r.metadata.labels!).sort()]),
    [
      ['vkvm:volumesnapshots:edit', ['rbac.authorization.k8s.io/aggregate-to-admin', 'rbac.authorization.k8s.io/aggregate-to-edit']],
      ['vkvm:volumesnapshots:view', ['rbac.authorization.k8s.io/aggregate-to-view']],
    ],
  );
  t.same(
    aggregated.flatMap((r) => r.rules.flatMap((rule) => rule.resources)),
    ['volumesnapshots', 'volumesnapshots'],
    'no contents, no classes',
  );
});

t.test("the snapshotter is the node's: node deployment on the node's socket, with the provisioner's kubeconfig", async (t) => {
  t.same(snapshotterCommand(spec, nodeStoragePaths(spec)), {
    argv: [
      '/var/cache/vkvm/cluster/abc/csi-snapshotter',
      '--csi-address=/run/vkvm/nodes/2/csi/csi.sock',
      '--kubeconfig=/var/lib/vkvm/nodes/2/csi-sidecars/provisioner.kubeconfig',
      '--node-deployment',
      '--v=2',
    ],
    env: { NODE_NAME: 'box-2' },
  });
});

t.test("the resizer asks a node's driver, and watches no pods (it expands online)", async (t) => {
  t.same(resizerCommand({ binary: '/c/csi-resizer', csiSocket: '/run/vkvm/csi/csi.sock', kubeconfig: '/s/kubeconfig', logLevel: 'info' }), {
    argv: [
      '/c/csi-resizer',
      '--csi-address=/run/vkvm/csi/csi.sock',
      '--kubeconfig=/s/kubeconfig',
      '--handle-volume-inuse-error=false',
      '--v=2',
    ],
  });
});

t.test('the snapshot controller hands each content to the node of its volume', async (t) => {
  t.same(snapshotControllerCommand({ binary: '/c/snapshot-controller', kubeconfig: '/s/kubeconfig', logLevel: 'debug' }), {
    argv: ['/c/snapshot-controller', '--kubeconfig=/s/kubeconfig', '--enable-distributed-snapshotting', '--v=5'],
  });
});

import t from 'tap';
import { join } from 'node:path';
import { readManifests } from '../kube/apply.js';
import { packageRoot } from '../package-root.js';
import { driverArgs, nodeStoragePaths, provisionerCommand, provisionerSubject, type NodeStorageSpec } from './node-storage-spec.js';

const spec: NodeStorageSpec = {
  nodeName: 'box-2',
  stateDir: '/var/lib/vkvm/nodes/2',
  runDir: '/run/vkvm/nodes/2',
  provisionerBinary: '/var/cache/vkvm/cluster/abc/csi-provisioner',
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

t.test("the driver serves the node by its name on its socket, and registers in that node's agent's plugin registry", async (t) => {
  t.same(driverArgs(spec, nodeStoragePaths(spec)), [
    'csi',
    '--csi-dir=/var/lib/vkvm/nodes/2/csi',
    '--socket=/run/vkvm/nodes/2/csi/csi.sock',
    '--node-id=box-2',
    '--log-level=info',
    '--registration-socket=/var/lib/vkvm/nodes/2/plugins_registry/csi.vkvm.io-reg.sock',
  ]);
  t.match(
    driverArgs({ ...spec, stateDir: '/var/lib/vkvm' }, nodeStoragePaths(spec)),
    ['csi', String, String, String, String, '--registration-socket=/var/lib/kubelet/plugins_registry/csi.vkvm.io-reg.sock'],
    "the host's one agent with the default state dir: the kubelet's registry",
  );
});

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
  for (const kind of ['ClusterRoleBinding', 'RoleBinding'])
    t.match(byKind(kind), [{ subjects: [{ kind: 'Group', name: group }] }], `the ${kind} names the group of every node's provisioner`);
  t.match(byKind('Role'), [{ metadata: { namespace: 'kube-system' }, rules: [{ resources: ['csistoragecapacities'] }] }]);
  t.equal((byKind('Role')[0] as unknown as { rules: unknown[] }).rules.length, 1, 'and nothing else in kube-system');
});

import t from 'tap';
import { metricsServerArgs, metricsServerObjects } from './metrics-server-config.js';

const files = {
  kubeconfig: '/s/metrics-server/kubeconfig',
  servingCert: '/s/metrics-server/serving.crt',
  servingKey: '/s/metrics-server/serving.key',
  kubeletCa: '/s/metrics-server/cluster-ca.crt',
};

t.test('it serves on the node address and verifies every kubelet against the cluster CA', async (t) => {
  const args = metricsServerArgs({ address: '10.250.0.1', port: 40123, files });
  for (const want of [
    '--bind-address=10.250.0.1',
    '--secure-port=40123',
    '--tls-cert-file=/s/metrics-server/serving.crt',
    '--kubeconfig=/s/metrics-server/kubeconfig',
    '--authentication-kubeconfig=/s/metrics-server/kubeconfig',
    '--authorization-kubeconfig=/s/metrics-server/kubeconfig',
    '--kubelet-preferred-address-types=InternalIP',
    '--kubelet-use-node-status-port',
    '--kubelet-certificate-authority=/s/metrics-server/cluster-ca.crt',
    '--metric-resolution=15s',
  ])
    t.ok(args.includes(want), want);
  t.notOk(
    args.some((a) => a.startsWith('--kubelet-insecure-tls')),
    'kubelet certificates are verified',
  );
});

t.test("registration: upstream's RBAC for its user, the APIService with its caBundle, Endpoints at its address", async (t) => {
  const objects = await metricsServerObjects({ address: '10.250.0.1', port: 40123, caPem: 'SERVING' });
  const byKind = (kind: string) => objects.filter((o) => o.kind === kind);
  t.match(byKind('APIService'), [
    {
      metadata: { name: 'v1beta1.metrics.k8s.io' },
      spec: {
        service: { namespace: 'kube-system', name: 'metrics-server', port: 443 },
        caBundle: Buffer.from('SERVING').toString('base64'),
        insecureSkipTLSVerify: undefined,
      },
    },
  ]);
  t.match(byKind('Endpoints'), [
    {
      metadata: { namespace: 'kube-system', name: 'metrics-server' },
      subsets: [{ addresses: [{ ip: '10.250.0.1' }], ports: [{ name: 'https', port: 40123 }] }],
    },
  ]);
  const bindings = [...byKind('ClusterRoleBinding'), ...byKind('RoleBinding')] as Array<{
    roleRef: { name: string };
    subjects: Array<{ kind: string; name: string }>;
  }>;
  t.same(
    bindings.map((b) => [b.roleRef.name, b.subjects]).sort(),
    [
      [
        'extension-apiserver-authentication-reader',
        [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'system:metrics-server' }],
      ],
      ['system:auth-delegator', [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'system:metrics-server' }]],
      ['system:metrics-server', [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: 'system:metrics-server' }]],
    ].sort(),
    'the three upstream bindings, to its certificate user',
  );
  t.match(
    objects.find((o) => o.metadata?.name === 'system:aggregated-metrics-reader'),
    {
      metadata: {
        labels: { 'rbac.authorization.k8s.io/aggregate-to-view': 'true', 'rbac.authorization.k8s.io/aggregate-to-edit': 'true' },
      },
    },
    "namespace viewers and editors read their own namespace's metrics",
  );
});

import t from 'tap';
import { kubeDnsObjects, localCorefile } from './cluster-dns-config.js';

t.test('the Corefile answers the cluster domain from the API on the one address, the rest from the host’s resolvers', async (t) => {
  const corefile = localCorefile({
    address: '10.250.0.1',
    kubeconfig: '/var/lib/vkvm/kubeconfig',
    readyPort: 41234,
    domain: 'cluster.local',
  });
  for (const line of [
    'bind 10.250.0.1',
    'ready 127.0.0.1:41234',
    'kubernetes cluster.local in-addr.arpa ip6.arpa {',
    'kubeconfig /var/lib/vkvm/kubeconfig',
    'forward . /etc/resolv.conf',
  ])
    t.ok(corefile.includes(line), `has ${line}`);
  t.notMatch(corefile, /\b(health|metrics|loop)\b/, 'nothing that listens on a port the machine shares');
});

t.test('kube-dns: a selectorless Service at 10.96.0.10 and one ready endpoint at CoreDNS’s address', async (t) => {
  t.match(kubeDnsObjects('10.250.0.1'), [
    {
      kind: 'Service',
      metadata: { namespace: 'kube-system', name: 'kube-dns' },
      spec: {
        clusterIP: '10.96.0.10',
        selector: undefined,
        ports: [
          { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 },
          { name: 'dns-tcp', port: 53, protocol: 'TCP', targetPort: 53 },
        ],
      },
    },
    {
      kind: 'EndpointSlice',
      metadata: { namespace: 'kube-system', labels: { 'kubernetes.io/service-name': 'kube-dns' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['10.250.0.1'], conditions: { ready: true } }],
      ports: [
        { name: 'dns', port: 53, protocol: 'UDP' },
        { name: 'dns-tcp', port: 53, protocol: 'TCP' },
      ],
    },
  ]);
});

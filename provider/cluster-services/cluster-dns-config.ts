// The local cluster's DNS as `vkvm up` runs it: CoreDNS on the host beside
// the control plane (not a Deployment: a cluster without container nodes has
// nowhere to run one), answering on node 1's InternalIP, behind the
// Service kube-system/kube-dns that kubelets and vkvm nodes name. The
// Service has no selector; its one EndpointSlice names that address, so
// every node's kube-proxy routes 10.96.0.10 to it. Pure.
/** The kubelet's --cluster-dns of the local cluster: the 10th address of its service range, as kubeadm picks. */
export const LOCAL_CLUSTER_DNS_IP = '10.96.0.10';
export const KUBE_DNS = { namespace: 'kube-system', name: 'kube-dns' } as const;
const PART_OF = { 'app.kubernetes.io/part-of': 'vkvm' };
const DNS_PORTS = [
  { name: 'dns', port: 53, protocol: 'UDP' },
  { name: 'dns-tcp', port: 53, protocol: 'TCP' },
];

export interface LocalDnsOptions {
  /** Where CoreDNS answers: node 1's InternalIP. */
  address: string;
  /** Credentials it lists Services, EndpointSlices and Namespaces with. */
  kubeconfig: string;
  /** Its readiness endpoint on loopback (200 once the Kubernetes plugin has synced). */
  readyPort: number;
  domain: string;
}

/**
 * kubeadm's Corefile for this one address: the cluster domain and reverse
 * zones from the API, the rest forwarded to the host's resolvers. No health,
 * metrics or loop plugin: they would listen on ports every node of the
 * machine shares, and nothing forwards back here.
 */
export function localCorefile(o: LocalDnsOptions): string {
  return `.:53 {
    bind ${o.address}
    errors
    ready 127.0.0.1:${o.readyPort}
    kubernetes ${o.domain} in-addr.arpa ip6.arpa {
        kubeconfig ${o.kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
    loadbalance
}
`;
}

/** The selectorless kube-dns Service at the cluster DNS address, and the EndpointSlice naming CoreDNS's address. */
export function kubeDnsObjects(address: string): object[] {
  return [
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { ...KUBE_DNS, labels: { ...PART_OF, 'k8s-app': 'kube-dns', 'kubernetes.io/name': 'CoreDNS' } },
      spec: { clusterIP: LOCAL_CLUSTER_DNS_IP, ports: DNS_PORTS.map((p) => ({ ...p, targetPort: p.port })) },
    },
    {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        namespace: KUBE_DNS.namespace,
        name: `${KUBE_DNS.name}-vkvm`,
        labels: { ...PART_OF, 'kubernetes.io/service-name': KUBE_DNS.name, 'endpointslice.kubernetes.io/managed-by': 'vkvm' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: [address], conditions: { ready: true } }],
      ports: DNS_PORTS,
    },
  ];
}

import t from 'tap';
import { parse } from 'yaml';
import { hostKubeProxyConfig, KUBE_PROXY_CONFIG_KEY, localKubeProxyConfigMap } from './kube-proxy-config.js';

const host = { kubeconfig: '/var/lib/vkvm/kubeconfig', nodeName: 'kvm-1' };

/** config.conf as kubeadm 1.33 writes it (trimmed to the fields that matter here). */
const KUBEADM_CONFIG = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
hostnameOverride: ""
mode: ""
nodePortAddresses: null
`;

t.test('a kubeadm cluster’s configuration is kept, with this host’s credentials and name and iptables for an empty mode', async (t) => {
  t.same(parse(hostKubeProxyConfig(KUBEADM_CONFIG, host)), {
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    bindAddress: '0.0.0.0',
    clientConnection: { kubeconfig: '/var/lib/vkvm/kubeconfig', qps: 0 },
    clusterCIDR: '10.244.0.0/16',
    hostnameOverride: 'kvm-1',
    mode: 'iptables',
    nodePortAddresses: null,
  });
});

t.test('without the ConfigMap: kube-proxy’s defaults, iptables mode', async (t) => {
  t.same(parse(hostKubeProxyConfig(undefined, host)), {
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    mode: 'iptables',
    clientConnection: { kubeconfig: '/var/lib/vkvm/kubeconfig' },
    hostnameOverride: 'kvm-1',
  });
});

t.test('a cluster’s nftables or ipvs mode is kept', async (t) => {
  for (const mode of ['nftables', 'ipvs'])
    t.equal((parse(hostKubeProxyConfig(KUBEADM_CONFIG.replace('mode: ""', `mode: ${mode}`), host)) as { mode: string }).mode, mode);
});

t.test('what is not a KubeProxyConfiguration is refused naming the field', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['a: [', /config\.conf: \(document\): not YAML/],
    ['- 1', /\(document\): is not a mapping/],
    [KUBEADM_CONFIG.replace('kind: KubeProxyConfiguration', 'kind: KubeletConfiguration'), /: kind: must be KubeProxyConfiguration/],
    [KUBEADM_CONFIG.replace('v1alpha1', 'v1beta9'), /: apiVersion: must be kubeproxy.config.k8s.io\/v1alpha1/],
    [KUBEADM_CONFIG.replace('mode: ""', 'mode: userspace'), /: mode: must be one of iptables, nftables, ipvs, got "userspace"/],
  ];
  for (const [text, error] of cases) t.throws(() => hostKubeProxyConfig(text, host), error);
});

t.test('vkvm up’s ConfigMap: iptables over the cluster CIDR, the machine’s conntrack and localnet settings untouched', async (t) => {
  const cm = localKubeProxyConfigMap('10.244.0.0/16');
  t.match(cm.metadata, { namespace: 'kube-system', name: 'kube-proxy' });
  t.same(parse(cm.data[KUBE_PROXY_CONFIG_KEY]!), {
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    mode: 'iptables',
    clusterCIDR: '10.244.0.0/16',
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
    iptables: { localhostNodePorts: false },
    nodePortAddresses: ['primary'],
  });
});

// kube-proxy's configuration on a vkvm host: the cluster's own
// KubeProxyConfiguration (the `config.conf` key of ConfigMap
// kube-system/kube-proxy, which kubeadm writes and its DaemonSet mounts) with
// what is this host's written over it, as the DaemonSet's pod gets it from
// its flags (hostname) and its mounted kubeconfig. A cluster without that
// ConfigMap gets kube-proxy's defaults. Pure.
import { parse, stringify } from 'yaml';

export const KUBE_PROXY_CONFIGMAP = { namespace: 'kube-system', name: 'kube-proxy' } as const;
/** The ConfigMap key kubeadm keeps the configuration under. */
export const KUBE_PROXY_CONFIG_KEY = 'config.conf';
const API_VERSION = 'kubeproxy.config.k8s.io/v1alpha1';
const KIND = 'KubeProxyConfiguration';
/** The modes kube-proxy 1.33 has on Linux; only iptables is tested with vkvm. */
const MODES = ['', 'iptables', 'nftables', 'ipvs'];

export class KubeProxyConfigError extends Error {
  readonly kind = 'KubeProxyConfigError';
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`ConfigMap ${KUBE_PROXY_CONFIGMAP.namespace}/${KUBE_PROXY_CONFIGMAP.name} ${KUBE_PROXY_CONFIG_KEY}: ${field}: ${message}`);
    this.name = 'KubeProxyConfigError';
  }
}

export interface HostKubeProxy {
  /** The node's own credentials (kube-proxy runs as the node, granted system:node-proxier in deploy/rbac.yaml). */
  kubeconfig: string;
  nodeName: string;
}

/**
 * The configuration file kube-proxy is run with: the cluster's (`clusterText`,
 * undefined without the ConfigMap), its connection and hostname this host's.
 * Bad YAML or another kind is an error naming the field.
 */
export function hostKubeProxyConfig(clusterText: string | undefined, host: HostKubeProxy): string {
  let cluster: Record<string, unknown> = {};
  if (clusterText !== undefined) {
    let parsed: unknown;
    try {
      parsed = parse(clusterText);
    } catch (err) {
      throw new KubeProxyConfigError('(document)', `not YAML: ${(err as Error).message}`);
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))
      throw new KubeProxyConfigError('(document)', 'is not a mapping');
    cluster = parsed as Record<string, unknown>;
    if (cluster.kind !== KIND) throw new KubeProxyConfigError('kind', `must be ${KIND}, got ${JSON.stringify(cluster.kind)}`);
    if (cluster.apiVersion !== API_VERSION)
      throw new KubeProxyConfigError('apiVersion', `must be ${API_VERSION}, got ${JSON.stringify(cluster.apiVersion)}`);
  }
  const mode = cluster.mode ?? '';
  if (typeof mode !== 'string' || !MODES.includes(mode))
    throw new KubeProxyConfigError('mode', `must be one of iptables, nftables, ipvs, got ${JSON.stringify(mode)}`);
  const connection = (cluster.clientConnection as Record<string, unknown> | undefined) ?? {};
  return stringify({
    ...cluster,
    apiVersion: API_VERSION,
    kind: KIND,
    mode: mode || 'iptables',
    // The cluster's points at the DaemonSet pod's service-account kubeconfig.
    clientConnection: { ...connection, kubeconfig: host.kubeconfig },
    hostnameOverride: host.nodeName,
  });
}

/**
 * The ConfigMap `vkvm up` makes in its own cluster, as kubeadm does, so its
 * nodes read their configuration the way joined hosts do. The machine's
 * conntrack and localnet settings are left as they are (0: unchanged): every
 * node of a local cluster shares one kernel with everything else on it.
 */
export function localKubeProxyConfigMap(clusterCidr: string): {
  apiVersion: 'v1';
  kind: 'ConfigMap';
  metadata: { namespace: string; name: string; labels: Record<string, string> };
  data: Record<string, string>;
} {
  const config = {
    apiVersion: API_VERSION,
    kind: KIND,
    mode: 'iptables',
    clusterCIDR: clusterCidr,
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
    // Else kube-proxy sets route_localnet on every interface of the host.
    iptables: { localhostNodePorts: false },
    // NodePorts on the node's own addresses, not on every address of the machine.
    nodePortAddresses: ['primary'],
  };
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { ...KUBE_PROXY_CONFIGMAP, labels: { 'app.kubernetes.io/part-of': 'vkvm' } },
    data: { [KUBE_PROXY_CONFIG_KEY]: stringify(config) },
  };
}

// The configuration files of one container node (an ordinary Kubernetes
// node of `vkvm up --container-nodes M`): containerd's, the kubelet's, its
// bootstrap kubeconfig, flannel's net-conf and the CNI network flannel's lease
// makes. Pure: paths come from the node's directories, nothing touches the
// machine. Everything a component would put in a host-wide place (/var/lib,
// /etc/cni, /opt/cni) is pointed into the node's own directories, so several
// nodes share one machine and a stop leaves nothing behind.
import { join } from 'node:path';
import { stringify } from 'yaml';
import { parseIpv4Range } from '../network/ipv4.js';

export interface ContainerNodeDirs {
  /** Persistent while the node runs: containerd's content and snapshots, the kubelet's root. */
  rootDir: string;
  /** Volatile: sockets, containerd's state, flannel's lease. */
  runDir: string;
}

export const containerdSocket = (d: ContainerNodeDirs): string => join(d.runDir, 'containerd.sock');
export const cniConfDir = (d: ContainerNodeDirs): string => join(d.rootDir, 'cni', 'net.d');
export const kubeletRootDir = (d: ContainerNodeDirs): string => join(d.rootDir, 'kubelet');
export const flannelSubnetFile = (d: ContainerNodeDirs): string => join(d.runDir, 'flannel', 'subnet.env');
/** Where the kubelet writes the credentials it bootstrapped; flannel uses them too. */
export const kubeletKubeconfig = (d: ContainerNodeDirs): string => join(d.rootDir, 'kubelet.conf');
export const bootstrapKubeconfigPath = (d: ContainerNodeDirs): string => join(d.rootDir, 'bootstrap-kubelet.conf');
export const CNI_BIN_DIR = '/usr/lib/cni';
export const CNI_BRIDGE = 'cni0';
export const CNI_NETWORK = 'vkvm-flannel';

const toml = (v: string | number | boolean) => (typeof v === 'string' ? JSON.stringify(v) : String(v));

/** containerd 1.6's config (version 2): the CRI plugin with runc, cgroupfs, the local pause image and the node's CNI dirs. */
export function containerdConfig(d: ContainerNodeDirs, o: { sandboxImage: string }): string {
  const sections: Array<[string, Record<string, string | number | boolean>]> = [
    ['', { version: 2, root: join(d.rootDir, 'containerd'), state: join(d.runDir, 'containerd') }],
    ['grpc', { address: containerdSocket(d) }],
    ['ttrpc', { address: join(d.runDir, 'containerd.ttrpc.sock') }],
    ['plugins."io.containerd.internal.v1.opt"', { path: join(d.rootDir, 'opt') }],
    [
      'plugins."io.containerd.grpc.v1.cri"',
      {
        sandbox_image: o.sandboxImage,
        // The kubelet's stream server is the only one reached from outside.
        stream_server_address: '127.0.0.1',
        disable_apparmor: true,
        enable_selinux: false,
        // A node may be a container lacking CAP_SYS_RESOURCE, which lowering a pod's OOM score needs: keep pods'
        // scores at or above containerd's (the kubelet's -998 for sandboxes would make runc fail).
        restrict_oom_score_adj: true,
      },
    ],
    ['plugins."io.containerd.grpc.v1.cri".cni', { bin_dir: CNI_BIN_DIR, conf_dir: cniConfDir(d), max_conf_num: 1 }],
    ['plugins."io.containerd.grpc.v1.cri".containerd', { snapshotter: 'overlayfs', default_runtime_name: 'runc' }],
    ['plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc', { runtime_type: 'io.containerd.runc.v2' }],
    ['plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options', { SystemdCgroup: false }],
  ];
  return sections
    .map(([name, kv]) => [name ? `[${name}]` : '', ...Object.entries(kv).map(([k, v]) => `${k} = ${toml(v)}`)].filter(Boolean).join('\n'))
    .join('\n\n')
    .concat('\n');
}

export interface KubeletOptions {
  clusterDns: string[];
  clusterDomain: string;
  /** The cgroup the node's pods go below (cgroupfs driver), apart from every other node's. */
  cgroupRoot: string;
  clientCaFile: string;
}

/** The KubeletConfiguration: webhook authn/authz, cgroupfs, the node's own dirs, and nothing listening beyond the node. */
export function kubeletConfig(d: ContainerNodeDirs, o: KubeletOptions): string {
  return stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: o.clientCaFile } },
    authorization: { mode: 'Webhook' },
    cgroupDriver: 'cgroupfs',
    cgroupRoot: o.cgroupRoot,
    clusterDNS: o.clusterDns,
    clusterDomain: o.clusterDomain,
    containerRuntimeEndpoint: `unix://${containerdSocket(d)}`,
    podLogsDir: join(d.rootDir, 'pod-logs'),
    // A machine shared with other nodes and workloads: its swap, its disk use are not this node's to refuse.
    failSwapOn: false,
    evictionHard: { 'memory.available': '1Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
    imageGCHighThresholdPercent: 100,
    // The local images are imported, never pulled: keep them.
    imageMinimumGCAge: '876000h',
    rotateCertificates: true,
    // A cluster-CA serving certificate, as the API server verifies kubelets (vkvm's approver approves it).
    serverTLSBootstrap: true,
    healthzBindAddress: '127.0.0.1',
    readOnlyPort: 0,
    resolvConf: '/etc/resolv.conf',
    staticPodPath: '',
  });
}

/** The kubeconfig the kubelet's TLS bootstrap starts from: a bootstrap token, as `vkvm join` uses. */
export function bootstrapKubeconfig(o: { server: string; caData: string; token: string }): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'local', cluster: { server: o.server, 'certificate-authority-data': o.caData } }],
    users: [{ name: 'bootstrap', user: { token: o.token } }],
    contexts: [{ name: 'bootstrap', context: { cluster: 'local', user: 'bootstrap' } }],
    'current-context': 'bootstrap',
  });
}

/** flannel's net-conf.json: the cluster's pod network, host-gw. */
export const flannelNetConf = (clusterCidr: string): string =>
  JSON.stringify({ Network: clusterCidr, EnableIPv4: true, Backend: { Type: 'host-gw' } });

/** The FLANNEL_SUBNET (as a network: flannel writes the gateway's address) and FLANNEL_MTU of flannel's subnet.env. */
export function parseSubnetEnv(text: string): { subnet: string; mtu: number } {
  const env = Object.fromEntries(
    text
      .split('\n')
      .map((l) => l.trim().split('='))
      .filter((kv) => kv.length === 2),
  );
  const mtu = Number(env.FLANNEL_MTU);
  if (!Number.isInteger(mtu) || mtu <= 0) throw new Error(`subnet.env: FLANNEL_MTU missing or malformed: ${env.FLANNEL_MTU}`);
  return { subnet: parseIpv4Range(env.FLANNEL_SUBNET ?? '', 'subnet.env FLANNEL_SUBNET').cidr, mtu };
}

/**
 * The node's CNI network, what flannel's CNI plugin would delegate: a bridge
 * whose address is the gateway of the node's lease and the pods' default
 * route, host-local addresses from it, no masquerade (pod sources cross the pod network as they are).
 */
export function cniConfList(d: ContainerNodeDirs, lease: { subnet: string; mtu: number }): string {
  return JSON.stringify({
    cniVersion: '0.4.0',
    name: CNI_NETWORK,
    plugins: [
      {
        type: 'bridge',
        bridge: CNI_BRIDGE,
        isGateway: true,
        // The pods' default route via the bridge, as flannel's plugin delegates: without it a pod reaches only its own node's range.
        isDefaultGateway: true,
        ipMasq: false,
        hairpinMode: true,
        mtu: lease.mtu,
        ipam: { type: 'host-local', ranges: [[{ subnet: lease.subnet }]], dataDir: join(d.runDir, 'cni', 'ipam') },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  });
}

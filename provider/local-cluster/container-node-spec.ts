// What vkvm up hands a container node's init (container-node.ts), and the
// log line by which the init says the node is ready.
import type { CgroupMounts } from './cgroup-mounts.js';
import type { ContainerNodeDirs } from './container-node-config.js';

/** The log message vkvm up waits for: the kubelet joined and the node's CNI network is written. */
export const CONTAINER_NODE_READY = 'container node ready';

export interface ContainerNodeSpec extends ContainerNodeDirs {
  name: string;
  /** Its address on the nodes' segment: the Node's InternalIP and flannel's public IP. */
  address: string;
  /** The vkvm-cluster binary (kubelet, flanneld, kubectl subcommands). */
  binary: string;
  /** The OCI layout of the local images, imported into the node's containerd. */
  imagesLayout: string;
  pauseImage: string;
  /** The API server as the node reaches it, the cluster CA (base64 PEM) and a bootstrap token. */
  server: string;
  caData: string;
  token: string;
  clusterCidr: string;
  clusterDns: string[];
  /** The cluster's KubeProxyConfiguration (ConfigMap kube-system/kube-proxy's config.conf). */
  kubeProxyConfig: string;
  clusterDomain: string;
  /** The node's cgroup subtree, relative to each hierarchy's root. */
  cgroupBase: string;
  cgroups: CgroupMounts;
  logLevel: string;
}

// Flags shared by `vkvm node` and `vkvm up`, and their help text.
import type { ParseArgsConfig } from 'node:util';

export const AGENT_OPTIONS = {
  kubeconfig: { type: 'string' },
  'node-name': { type: 'string' },
  'state-dir': { type: 'string' },
  'run-dir': { type: 'string' },
  'image-cache-dir': { type: 'string' },
  'libvirt-cache-dir': { type: 'string' },
  'image-store-dir': { type: 'string' },
  'plugin-registry-dir': { type: 'string' },
  'insecure-registry': { type: 'string', multiple: true },
  'registry-ca-file': { type: 'string', multiple: true },
  'max-parallel-image-pulls': { type: 'string' },
  'local-registry': { type: 'string', multiple: true },
  'image-gc-high-threshold': { type: 'string' },
  'image-gc-low-threshold': { type: 'string' },
  'image-minimum-gc-age': { type: 'string' },
  'image-store-quota-mib': { type: 'string' },
  'image-cache-quota-mib': { type: 'string' },
  'kubelet-port': { type: 'string' },
  'kubelet-bind-address': { type: 'string' },
  'healthz-port': { type: 'string' },
  'migration-port': { type: 'string' },
  'internal-ip': { type: 'string' },
  label: { type: 'string', multiple: true },
  taint: { type: 'string', multiple: true },
  'no-default-taint': { type: 'boolean' },
  'max-pods': { type: 'string' },
  'memory-reserved-mib': { type: 'string' },
  'no-software-emulation': { type: 'boolean' },
  'approve-serving-csr': { type: 'boolean' },
  'rotate-client-cert': { type: 'boolean' },
  bridge: { type: 'string' },
  'cgroup-parent': { type: 'string' },
  'qemu-uid-base': { type: 'string' },
  'pod-cidr': { type: 'string' },
  'cluster-dns': { type: 'string' },
  'cluster-domain': { type: 'string' },
  'kube-proxy': { type: 'string' },
  'kube-proxy-binary': { type: 'string' },
  'host-image-dir': { type: 'string', multiple: true },
  'host-disk-dir': { type: 'string', multiple: true },
  'service-cidr': { type: 'string' },
  'image-download-max-mib': { type: 'string' },
  'image-download-timeout-s': { type: 'string' },
  'image-download-deny': { type: 'string', multiple: true },
  'image-download-allow': { type: 'string', multiple: true },
  'max-streaming-sessions': { type: 'string' },
  'max-streaming-sessions-per-user': { type: 'string' },
  'streaming-connection-idle-timeout': { type: 'string' },
  'watch-progress-deadline': { type: 'string' },
  'log-level': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies ParseArgsConfig['options'];

export const AGENT_HELP = `Node agent flags:
  --kubeconfig FILE            cluster credentials of the agent (vkvm node: default $KUBECONFIG)
  --node-name NAME             Node name (default: hostname)
  --state-dir DIR              persistent state: certificates, VM directories (default /var/lib/vkvm)
  --image-cache-dir DIR        downloaded VM images, shared by all VMs (default /var/cache/vkvm/images)
  --libvirt-cache-dir DIR      libvirt's QEMU capabilities cache, shared by all VMs; made root-only
                               (default /var/cache/vkvm/libvirt)
  --image-store-dir DIR        images pulled from registries and the disks taken out of them
                               (default <state-dir>/images)
  --plugin-registry-dir DIR    where CSI drivers' registration sockets appear (default
                               /var/lib/kubelet/plugins_registry; <state-dir>/plugins_registry when
                               --state-dir is not the default)
  --insecure-registry HOST[:PORT]  a registry that may answer plain HTTP (repeatable; loopback
                               registries always may)
  --registry-ca-file FILE      a PEM CA trusted for registries besides the system's (repeatable)
  --max-parallel-image-pulls N image pulls and URL downloads at once (default 3)
  --local-registry HOST:PORT   a registry on this node (loopback or its own address) pods may pull
                               from (repeatable; localhost:5000 and 127.0.0.1:5000 always may)
  --image-gc-high-threshold N  image store (and URL image cache) filesystem use (%) that starts their GC
                               (default 85; 100 turns it off)
  --image-gc-low-threshold N   use (%) garbage collection frees down to (default 80)
  --image-minimum-gc-age D     images pulled more recently are never collected (default 2m)
  --image-store-quota-mib N    bytes (MiB) the image store may hold: past it, GC frees down to
                               low/high of it too; pulls are never refused (default 0: none)
  --image-cache-quota-mib N    the same for the URL image cache; a new URL is refused while what is
                               in use or too new fills it (default 0: none)
  --run-dir DIR                launcher sockets (default /run/vkvm)
  --kubelet-port N             kubelet API port (default 10250)
  --kubelet-bind-address IP    kubelet API bind address (default 0.0.0.0)
  --healthz-port N             loopback liveness port, 0 to disable (default 10248)
  --migration-port N           live migration relay port on the InternalIP (TLS, node certificates
                               only), 0 to disable: the node then neither sends nor receives
                               migrations (default 10262)
  --internal-ip IP             InternalIP to advertise (default: address of the default route)
  --label K=V                  extra node label (repeatable)
  --taint K[=V]:EFFECT         extra node taint (repeatable)
  --no-default-taint           do not add virtual-kubelet.io/provider=kvm:NoSchedule
  --max-pods N                 pods capacity (default 110)
  --memory-reserved-mib N      memory kept back from allocatable (default 1024)
  --no-software-emulation      never fall back to TCG when KVM is unusable
  --approve-serving-csr        approve the agent's own kubelet-serving CSR (needs RBAC)
  --rotate-client-cert         renew the kubeconfig's client certificate through the CSR API
                               (set by vkvm join: the kubeconfig names one PEM with cert and key)
  --bridge NAME                pod network bridge, created if missing (default vkvm0)
  --cgroup-parent PATH         parent of the VMs' cgroups in every hierarchy (default vkvm)
  --qemu-uid-base N            first uid of the 1000000 the VMs' QEMUs run as (default 3000000);
                               nodes sharing a machine need ranges apart
  --pod-cidr CIDR              this node's pod range (default: Node.spec.podCIDR from the controller manager)
  --cluster-dns IP[,IP]        the cluster DNS servers ClusterFirst guests are told (default: the ClusterIP
                               of Service kube-system/kube-dns, looked up; none: guests get the host's)
  --cluster-domain DOMAIN      the cluster's DNS domain, for guests' search path (default cluster.local)
  --kube-proxy true|false      run the real kube-proxy for this host, so VMs reach ClusterIP Services and
                               NodePorts; configured by ConfigMap kube-system/kube-proxy where the cluster
                               has one (vkvm node: default false; vkvm join and vkvm up: true)
  --kube-proxy-binary FILE     the vkvm-cluster binary whose kube-proxy runs (default: built from
                               deploy/cluster once, cached under /var/cache/vkvm/cluster)
  --host-image-dir DIR         a directory whose regular files pods and VMIs may name as boot images,
                               kernels and initrds by host path (repeatable; default none)
  --host-disk-dir DIR          a directory where KubeVirt hostDisks may live (repeatable; default none:
                               hostDisk is off)
  --service-cidr CIDR          the cluster's service range, which image downloads may not reach
                               (default 10.96.0.0/12, kubeadm's)
  --image-download-max-mib N   largest image an http(s) URL or a registry may deliver, and largest disk
                               taken out of a registry image (default 20480)
  --image-download-timeout-s N time one image download may take (default 3600)
  --image-download-deny CIDR   also refuse image downloads from this range (repeatable); loopback,
                               link-local, multicast, this node's addresses and the service range always are
  --image-download-allow CIDR  let image downloads reach this range even so (repeatable; an
                               operator's exception, e.g. a mirror on the node)
  --max-streaming-sessions N   exec, attach and log follow sessions open at once; more get 429 (default 256)
  --max-streaming-sessions-per-user N
                               the same per user (username and uid); kube-apiserver proxies
                               every kubectl session as one user (default 128)
  --streaming-connection-idle-timeout DURATION
                               close an exec/attach console session after this long
                               without traffic (default 4h, as the kubelet)
  --watch-progress-deadline DURATION
                               watch the API server again when a watch delivered nothing,
                               not even a bookmark (sent every minute), for this long: a
                               half-open connection (default 2m)
  --log-level LEVEL            trace|debug|info|warn|error (default info)
`;

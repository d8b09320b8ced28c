// The node agent's configuration, parsed and validated once at start-up.
// Nothing else reads process.env or argv.
import { hostname } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import ipaddr from 'ipaddr.js';
import { DEFAULT_DOWNLOAD_POLICY, type DownloadPolicy } from '../vmm/disks/download-policy.js';
import { LAUNCHER_DEFAULTS } from '../launcher/agent-api.js';
import { kubeconfigPath } from './kube/kubeconfig-path.js';
import { DEFAULT_WATCH_PROGRESS_DEADLINE_MS } from './kube/progress-watch.js';
import { parseIpv4Range } from './network/ipv4.js';
import { DEFAULT_BRIDGE } from './network/pod-network.js';
import { QEMU_UID_BASE, QEMU_UID_COUNT } from './launchers/qemu-uids.js';
import { INTERFACE_NAME } from './network/host.js';
import { pluginRegistryDirOf } from './csi-node/registry-dir.js';
import { ConfigError } from './config-error.js';

export { ConfigError };
import { parseDuration } from './duration.js';
import { DEFAULT_IMAGE_GC_PERIOD_MS, DEFAULT_IMAGE_GC_POLICY, type ImageGcPolicy } from './images/image-gc.js';
import { DEFAULT_SESSION_LIMITS, type SessionLimits } from './kubelet-api/session-limiter.js';
import { DEFAULT_IDLE_TIMEOUT_MS } from './kubelet-api/streaming/idle-timer.js';

export interface Taint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

export interface AgentConfig {
  kubeconfigPath: string;
  nodeName: string;
  /** Persistent state: serving certificate, launcher records. */
  stateDir: string;
  /** Volatile state: launcher sockets. */
  runDir: string;
  /** Node-wide cache of downloaded VM images. */
  imageCacheDir: string;
  /** The node's libvirt cache (QEMU capabilities), shared by its launchers' libvirtds. */
  libvirtCacheDir: string;
  /** The registry image store (provider/images/store.ts); default <stateDir>/images. */
  imageStoreDir: string;
  /** Where CSI drivers' registration sockets appear (csi-node/registry-dir.ts pluginRegistryDirOf). */
  pluginRegistryDir: string;
  /** Registries besides loopback that may answer plain HTTP (host or host:port). */
  insecureRegistries: string[];
  /** PEM files of CAs trusted for registries besides the system's roots. */
  registryCaFiles: string[];
  /** Image pulls running at once; more wait their turn. */
  maxParallelImagePulls: number;
  /** Registries (host:port) that may be on this node itself (loopback, its own addresses); no other registry request may reach it. */
  localRegistries: string[];
  /** When the image store is garbage-collected (the kubelet's thresholds and minimum age). */
  imageGc: ImageGcPolicy;
  /** Operator byte quotas (0: none) on the image store and the URL image cache, beside the filesystem thresholds. */
  imageStoreQuotaBytes: number;
  imageCacheQuotaBytes: number;
  /** How often garbage collection looks at the disk besides after each pull (the kubelet's ImageGCPeriod). */
  imageGcPeriodMs: number;
  kubeletPort: number;
  kubeletBindAddress: string;
  /** Plain-HTTP liveness endpoint on loopback, like the kubelet's :10248. */
  healthzPort: number;
  /** The migration relay's TLS port on the InternalIP (provider/migration/); 0: this node neither sends nor receives migrations. */
  migrationPort: number;
  /** InternalIP to advertise; detected from the default route when absent. */
  internalIP?: string;
  extraLabels: Record<string, string>;
  taints: Taint[];
  maxPods: number;
  memoryReservedMiB: number;
  allowSoftwareEmulation: boolean;
  leaseDurationS: number;
  leaseRenewIntervalS: number;
  /** How often host facts are re-read; status is patched only on change or after statusReportIntervalS. */
  statusCheckIntervalS: number;
  statusReportIntervalS: number;
  /** Approve our own kubelet-serving CSR when RBAC allows (vkvm up); otherwise wait for an approver. */
  approveServingCsr: boolean;
  /**
   * Request and approve the kubelet-serving CSR with this kubeconfig instead
   * of the agent's own (vkvm up's node 1: its operator's admin). Node 1 shares
   * the API server's address, which the cluster's approver rightly never
   * grants a node; vkvm up knows this node is that host. No flag sets it.
   */
  servingCsrKubeconfigPath?: string;
  /**
   * Renew the kubeconfig's client certificate through the CSR API (a joined
   * node: the kubeconfig names one PEM file holding certificate and key).
   */
  rotateClientCert: boolean;
  /** Where required executables are looked up (preflight conditions). */
  searchPath: string;
  /** VMs stop when the agent dies, even by SIGKILL (vkvm up); otherwise they outlive it. */
  vmsDieWithAgent: boolean;
  /** Linux bridge of the pod network. */
  bridge: string;
  /** Below each cgroup hierarchy, the parent of the VMs' cgroups. */
  cgroupParent: string;
  /** The first of the node's QEMU uids (QEMU_UID_COUNT of them). */
  qemuUidBase: number;
  /** The node's pod range when not taken from Node.spec.podCIDR. */
  podCidr?: string;
  /** The cluster DNS servers (kubelet's --cluster-dns); looked up from Service kube-system/kube-dns when absent. */
  clusterDns?: string[];
  /** The cluster's DNS domain (kubelet's --cluster-domain). */
  clusterDomain: string;
  /** Run kube-proxy for this host (provider/cluster-services/kube-proxy.ts); `binary`: vkvm-cluster, else the build cache's. */
  kubeProxy?: { binary?: string };
  /** Directories whose files pods and VMIs may name by host path (vmm/host-files.ts); empty by default. */
  hostImageDirs: string[];
  /** Directories where KubeVirt hostDisks may live; empty: hostDisk is off. */
  hostDiskDirs: string[];
  /** Where image URLs may lead and how large and slow they may be (the service range is refused). */
  imageDownloads: DownloadPolicy;
  /** Caps on concurrent kubelet API streaming sessions (exec, attach, log follow). */
  sessionLimits: SessionLimits;
  /** An exec/attach console session without traffic for this long is closed. */
  streamingIdleTimeoutMs: number;
  /** A watch silent this long is taken for a half-open connection and started again. */
  watchProgressDeadlineMs: number;
  logLevel: string;
}

/** The migration relay's default port (docs/design/live-migration.md §4). */
export const DEFAULT_MIGRATION_PORT = 10262;

export const DEFAULT_TAINT: Taint = { key: 'virtual-kubelet.io/provider', value: 'kvm', effect: 'NoSchedule' };

/** Raw option values as the CLI parsed them (strings, repeated flags as arrays). */
export interface AgentFlags {
  kubeconfig?: string;
  'node-name'?: string;
  'state-dir'?: string;
  'run-dir'?: string;
  'image-cache-dir'?: string;
  'libvirt-cache-dir'?: string;
  'image-store-dir'?: string;
  'plugin-registry-dir'?: string;
  'insecure-registry'?: string[];
  'registry-ca-file'?: string[];
  'max-parallel-image-pulls'?: string;
  'local-registry'?: string[];
  'image-gc-high-threshold'?: string;
  'image-gc-low-threshold'?: string;
  'image-minimum-gc-age'?: string;
  'image-store-quota-mib'?: string;
  'image-cache-quota-mib'?: string;
  'kubelet-port'?: string;
  'kubelet-bind-address'?: string;
  'healthz-port'?: string;
  'migration-port'?: string;
  'internal-ip'?: string;
  label?: string[];
  taint?: string[];
  'no-default-taint'?: boolean;
  'max-pods'?: string;
  'memory-reserved-mib'?: string;
  'no-software-emulation'?: boolean;
  'approve-serving-csr'?: boolean;
  'rotate-client-cert'?: boolean;
  bridge?: string;
  'cgroup-parent'?: string;
  'qemu-uid-base'?: string;
  'pod-cidr'?: string;
  'cluster-dns'?: string;
  'cluster-domain'?: string;
  'kube-proxy'?: string;
  'kube-proxy-binary'?: string;
  'host-image-dir'?: string[];
  'host-disk-dir'?: string[];
  'service-cidr'?: string;
  'image-download-max-mib'?: string;
  'image-download-timeout-s'?: string;
  'image-download-deny'?: string[];
  'image-download-allow'?: string[];
  'max-streaming-sessions'?: string;
  'max-streaming-sessions-per-user'?: string;
  'streaming-connection-idle-timeout'?: string;
  'watch-progress-deadline'?: string;
  'log-level'?: string;
}

function int(flags: AgentFlags, name: keyof AgentFlags, dflt: number, min: number, max: number): number {
  const raw = flags[name];
  if (raw === undefined) return dflt;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ConfigError(`--${name}`, `must be an integer in [${min}, ${max}], got ${JSON.stringify(raw)}`);
  }
  return n;
}

/** A true|false flag (one a later --flag=false must be able to turn off, so not a bare boolean). */
export function parseBool(raw: unknown, name: string, dflt = false): boolean {
  if (raw === undefined) return dflt;
  if (raw === 'true') return true;
  if (raw === 'false') return false;
  throw new ConfigError(`--${name}`, `must be true or false, got ${JSON.stringify(raw)}`);
}

/** setTimeout's longest delay, whole hours. */
const MAX_TIMEOUT_H = Math.floor((2 ** 31 - 1) / 3_600_000);

function duration(flags: AgentFlags, name: keyof AgentFlags, dfltMs: number): number {
  const raw = flags[name];
  if (raw === undefined) return dfltMs;
  const ms = typeof raw === 'string' ? parseDuration(raw) : undefined;
  if (ms === undefined || ms < 1000 || ms > MAX_TIMEOUT_H * 3_600_000) {
    throw new ConfigError(
      `--${name}`,
      `must be a duration from 1s to ${MAX_TIMEOUT_H}h such as 4h, 30m or 90s, got ${JSON.stringify(raw)}`,
    );
  }
  return ms;
}

const LABEL_KEY = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$/;

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const DNS_DOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$/;

/** Up to three IPv4 addresses, comma-separated (the resolver uses no more). */
function clusterDns(raw: string): string[] {
  const ips = raw.split(',').map((s) => s.trim());
  const bad = ips.find((ip) => !IPV4.test(ip));
  if (bad !== undefined) throw new ConfigError('--cluster-dns', `${JSON.stringify(bad)} is not an IPv4 address`);
  if (ips.length > 3) throw new ConfigError('--cluster-dns', `at most 3 addresses, got ${ips.length}`);
  return ips;
}

function dnsDomain(raw: string): string {
  if (!DNS_DOMAIN.test(raw)) throw new ConfigError('--cluster-domain', `${JSON.stringify(raw)} is not a DNS domain such as cluster.local`);
  return raw;
}

export function parseLabel(s: string): [string, string] {
  const i = s.indexOf('=');
  const [k, v] = i < 0 ? [s, ''] : [s.slice(0, i), s.slice(i + 1)];
  if (!LABEL_KEY.test(k)) throw new ConfigError('--label', `invalid label key ${JSON.stringify(k)}`);
  if (!LABEL_VALUE.test(v)) throw new ConfigError('--label', `invalid label value ${JSON.stringify(v)} for ${k}`);
  return [k, v];
}

/** Parses `key[=value]:Effect`, as kubectl taint does. */
export function parseTaint(s: string): Taint {
  const m = /^([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$/.exec(s);
  if (!m?.[1] || !LABEL_KEY.test(m[1])) {
    throw new ConfigError('--taint', `want key[=value]:NoSchedule|PreferNoSchedule|NoExecute, got ${JSON.stringify(s)}`);
  }
  const taint: Taint = { key: m[1], effect: m[3] as Taint['effect'] };
  if (m[2]) taint.value = m[2];
  return taint;
}

/** A relative cgroup path of plain names, e.g. vkvm or vkvm/node-2: no "..", nothing absolute. */
function cgroupParent(value: string): string {
  if (!/^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/.test(value) || value.split('/').some((part) => part === '.' || part === '..')) {
    throw new ConfigError('--cgroup-parent', `${JSON.stringify(value)} is not a relative cgroup path such as vkvm or vkvm/node-2`);
  }
  return value;
}

/** kubeadm's default service range, where in-cluster services live. */
const DEFAULT_SERVICE_CIDR = '10.96.0.0/12';

function cidr(value: string, flag: string): string {
  try {
    const [net, bits] = ipaddr.parseCIDR(value);
    return `${net.toString()}/${bits}`;
  } catch {
    throw new ConfigError(flag, `${JSON.stringify(value)} is not a CIDR range`);
  }
}

function absoluteDirs(flags: AgentFlags, name: 'host-image-dir' | 'host-disk-dir'): string[] {
  return (flags[name] ?? []).map((dir) => {
    if (!isAbsolute(dir)) throw new ConfigError(`--${name}`, `${JSON.stringify(dir)} is not an absolute path`);
    return resolve(dir);
  });
}

/** host or host:port, as an image reference names a registry. */
function registryHost(value: string, flag = '--insecure-registry'): string {
  if (!/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:\d{1,5})?$/.test(value)) {
    throw new ConfigError(flag, `${JSON.stringify(value)} is not a registry host or host:port`);
  }
  return value;
}

/** host:port of a registry on this node; the port is required, so one listing cannot open every service of a host. */
function localRegistry(value: string): string {
  registryHost(value, '--local-registry');
  if (!/:\d{1,5}$/.test(value)) throw new ConfigError('--local-registry', `${JSON.stringify(value)} needs a port: HOST:PORT`);
  return value;
}

/**
 * Docker's conventional local registry (`registry:2` and Debian's
 * docker-registry listen on :5000), reachable on loopback without a flag;
 * any other registry on the node must be listed with --local-registry.
 */
export const DEFAULT_LOCAL_REGISTRIES = ['localhost:5000', '127.0.0.1:5000', '[::1]:5000'];

function imageGcPolicy(flags: AgentFlags): ImageGcPolicy {
  const high = int(flags, 'image-gc-high-threshold', DEFAULT_IMAGE_GC_POLICY.highThresholdPercent, 0, 100);
  const low = int(flags, 'image-gc-low-threshold', DEFAULT_IMAGE_GC_POLICY.lowThresholdPercent, 0, 100);
  if (low >= high) {
    throw new ConfigError(
      '--image-gc-low-threshold',
      `must be below --image-gc-high-threshold (${high}), got ${low}; set the high threshold to 100 to turn garbage collection off`,
    );
  }
  const raw = flags['image-minimum-gc-age'];
  const minAgeMs = raw === undefined ? DEFAULT_IMAGE_GC_POLICY.minAgeMs : raw === '0' ? 0 : parseDuration(raw);
  if (minAgeMs === undefined || minAgeMs > MAX_TIMEOUT_H * 3_600_000) {
    throw new ConfigError('--image-minimum-gc-age', `must be a duration such as 2m, 90s or 0s, got ${JSON.stringify(raw)}`);
  }
  return { highThresholdPercent: high, lowThresholdPercent: low, minAgeMs };
}

/** `env` is the process environment; only PATH and KUBECONFIG are read. */
export function resolveAgentConfig(flags: AgentFlags, env: { PATH?: string; KUBECONFIG?: string } = process.env): AgentConfig {
  const kubeconfig = kubeconfigPath(flags.kubeconfig, env);
  if (!kubeconfig) throw new ConfigError('--kubeconfig', 'is required (or set $KUBECONFIG)');
  const nodeName = (flags['node-name'] ?? hostname()).toLowerCase();
  if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(nodeName)) {
    throw new ConfigError('--node-name', `${JSON.stringify(nodeName)} is not a valid DNS subdomain`);
  }
  const ip = flags['internal-ip'];
  if (ip !== undefined && !/^\d{1,3}(\.\d{1,3}){3}$/.test(ip)) {
    throw new ConfigError('--internal-ip', `${JSON.stringify(ip)} is not an IPv4 address`);
  }
  const taints = (flags.taint ?? []).map(parseTaint);
  if (!flags['no-default-taint'] && !taints.some((t) => t.key === DEFAULT_TAINT.key)) taints.unshift(DEFAULT_TAINT);
  const config: AgentConfig = {
    kubeconfigPath: kubeconfig,
    nodeName,
    stateDir: flags['state-dir'] ?? '/var/lib/vkvm',
    runDir: flags['run-dir'] ?? '/run/vkvm',
    imageCacheDir: flags['image-cache-dir'] ?? '/var/cache/vkvm/images',
    libvirtCacheDir: resolve(flags['libvirt-cache-dir'] ?? LAUNCHER_DEFAULTS.libvirtCacheDir),
    imageStoreDir: resolve(flags['image-store-dir'] ?? `${flags['state-dir'] ?? '/var/lib/vkvm'}/images`),
    pluginRegistryDir: resolve(flags['plugin-registry-dir'] ?? pluginRegistryDirOf(flags['state-dir'])),
    insecureRegistries: (flags['insecure-registry'] ?? []).map((r) => registryHost(r)),
    registryCaFiles: (flags['registry-ca-file'] ?? []).map((f) => resolve(f)),
    maxParallelImagePulls: int(flags, 'max-parallel-image-pulls', 3, 1, 64),
    localRegistries: [...DEFAULT_LOCAL_REGISTRIES, ...(flags['local-registry'] ?? []).map((r) => localRegistry(r))],
    imageGc: imageGcPolicy(flags),
    // Unset: only the filesystem rule, as the kubelet (no byte count fits every disk); docs/configuration.md.
    imageStoreQuotaBytes: int(flags, 'image-store-quota-mib', 0, 0, 2 ** 30) * 2 ** 20,
    imageCacheQuotaBytes: int(flags, 'image-cache-quota-mib', 0, 0, 2 ** 30) * 2 ** 20,
    imageGcPeriodMs: DEFAULT_IMAGE_GC_PERIOD_MS,
    kubeletPort: int(flags, 'kubelet-port', 10250, 1, 65535),
    kubeletBindAddress: flags['kubelet-bind-address'] ?? '0.0.0.0',
    healthzPort: int(flags, 'healthz-port', 10248, 0, 65535),
    migrationPort: int(flags, 'migration-port', DEFAULT_MIGRATION_PORT, 0, 65535),
    extraLabels: Object.fromEntries((flags.label ?? []).map(parseLabel)),
    taints,
    maxPods: int(flags, 'max-pods', 110, 1, 10000),
    memoryReservedMiB: int(flags, 'memory-reserved-mib', 1024, 0, 1 << 24),
    allowSoftwareEmulation: !flags['no-software-emulation'],
    leaseDurationS: 40,
    leaseRenewIntervalS: 10,
    statusCheckIntervalS: 10,
    statusReportIntervalS: 60,
    approveServingCsr: flags['approve-serving-csr'] ?? false,
    rotateClientCert: flags['rotate-client-cert'] ?? false,
    searchPath: env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    vmsDieWithAgent: false,
    bridge: flags.bridge ?? DEFAULT_BRIDGE,
    clusterDomain: dnsDomain(flags['cluster-domain'] ?? 'cluster.local'),
    cgroupParent: cgroupParent(flags['cgroup-parent'] ?? LAUNCHER_DEFAULTS.cgroupParent),
    // Up to the last uid (2^32 - 2) with room for a whole range.
    qemuUidBase: int(flags, 'qemu-uid-base', QEMU_UID_BASE, QEMU_UID_BASE, 2 ** 32 - 1 - QEMU_UID_COUNT),
    hostImageDirs: absoluteDirs(flags, 'host-image-dir'),
    hostDiskDirs: absoluteDirs(flags, 'host-disk-dir'),
    imageDownloads: {
      ...DEFAULT_DOWNLOAD_POLICY,
      maxBytes: int(flags, 'image-download-max-mib', DEFAULT_DOWNLOAD_POLICY.maxBytes / 2 ** 20, 1, 2 ** 30) * 2 ** 20,
      timeoutMs: int(flags, 'image-download-timeout-s', DEFAULT_DOWNLOAD_POLICY.timeoutMs / 1000, 1, 7 * 86400) * 1000,
      deniedCidrs: [
        cidr(flags['service-cidr'] ?? DEFAULT_SERVICE_CIDR, '--service-cidr'),
        ...(flags['image-download-deny'] ?? []).map((c) => cidr(c, '--image-download-deny')),
      ],
      allowedCidrs: (flags['image-download-allow'] ?? []).map((c) => cidr(c, '--image-download-allow')),
    },
    sessionLimits: {
      perNode: int(flags, 'max-streaming-sessions', DEFAULT_SESSION_LIMITS.perNode, 1, 1_000_000),
      perUser: int(flags, 'max-streaming-sessions-per-user', DEFAULT_SESSION_LIMITS.perUser, 1, 1_000_000),
    },
    streamingIdleTimeoutMs: duration(flags, 'streaming-connection-idle-timeout', DEFAULT_IDLE_TIMEOUT_MS),
    watchProgressDeadlineMs: duration(flags, 'watch-progress-deadline', DEFAULT_WATCH_PROGRESS_DEADLINE_MS),
    logLevel: flags['log-level'] ?? 'info',
  };
  if (ip !== undefined) config.internalIP = ip;
  if (!INTERFACE_NAME.test(config.bridge))
    throw new ConfigError('--bridge', `${JSON.stringify(config.bridge)} is not an interface name (1-15 of A-Z a-z 0-9 _ . -)`);
  if (flags['cluster-dns'] !== undefined) config.clusterDns = clusterDns(flags['cluster-dns']);
  if (parseBool(flags['kube-proxy'], 'kube-proxy'))
    config.kubeProxy = flags['kube-proxy-binary'] ? { binary: resolve(flags['kube-proxy-binary']) } : {};
  else if (flags['kube-proxy-binary'] !== undefined) throw new ConfigError('--kube-proxy-binary', 'applies only with --kube-proxy=true');
  if (flags['pod-cidr'] !== undefined) {
    try {
      config.podCidr = parseIpv4Range(flags['pod-cidr'], '--pod-cidr').cidr;
    } catch (err) {
      throw new ConfigError('--pod-cidr', (err as Error).message.replace(/^--pod-cidr: /, ''));
    }
  }
  return config;
}

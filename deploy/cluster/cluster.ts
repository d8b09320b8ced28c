// Builds and runs the control plane in deploy/cluster (Go, from Kubernetes'
// published modules). It makes four binaries: vkvm-cluster (control plane,
// kubelet, kube-proxy, flanneld, kubectl), pause (cmd/pause), and
// csi-provisioner, csi-snapshotter, snapshot-controller and csi-resizer (the CSI sidecars'
// own commands, `tool`s of go.mod: Go cannot import a main package, and a copy
// of one here would be a fork), from one module, so they share its Kubernetes release; coredns from a module of its own (coredns/), because the CoreDNS
// release whose etcd client matches the embedded etcd server (v1.12.1, etcd
// 3.5) needs client-go v0.32, and the later ones need etcd 3.6 clients. The
// binaries are cached under a hash of the Go sources so a second start takes
// seconds; the build logs progress because a cold build takes minutes on two
// cores.
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import type { Logger } from '../../provider/log.js';
import { packageRoot } from '../../provider/package-root.js';

const execFileP = promisify(execFile);

export const CLUSTER_SOURCE_DIR = join(packageRoot(), 'deploy', 'cluster');

export function defaultCacheDir(): string {
  return process.env.VKVM_CACHE_DIR ?? '/var/cache/vkvm';
}

/** The binaries one build makes, each in the cache entry under this name. */
export const CLUSTER_BINARIES = {
  cluster: 'vkvm-cluster',
  coredns: 'coredns',
  pause: 'pause',
  provisioner: 'csi-provisioner',
  snapshotter: 'csi-snapshotter',
  snapshotController: 'snapshot-controller',
  resizer: 'csi-resizer',
} as const;
export type ClusterBinaries = Record<keyof typeof CLUSTER_BINARIES, string>;

/** Bump when the build's commands or flags change: they are not in the sources hashed. */
const BUILD_RECIPE = 5;

async function sourceHash(): Promise<string> {
  const h = createHash('sha256').update(`recipe ${BUILD_RECIPE}\0`);
  const files = (await readdir(CLUSTER_SOURCE_DIR, { recursive: true }))
    .filter((f) => f.endsWith('.go') || basename(f) === 'go.mod' || basename(f) === 'go.sum')
    .sort();
  for (const f of files) {
    h.update(f)
      .update('\0')
      .update(await readFile(join(CLUSTER_SOURCE_DIR, f)))
      .update('\0');
  }
  h.update((await execFileP('go', ['version'])).stdout);
  return h.digest('hex').slice(0, 16);
}

/** Returns the path of a built vkvm-cluster binary, building it if the cache has none for these sources. */
export async function ensureClusterBinary(log: Logger, cacheDir = defaultCacheDir(), signal?: AbortSignal): Promise<string> {
  return (await ensureClusterBinaries(log, cacheDir, signal)).cluster;
}

/** The sidecar that provisions CSI volumes, built from the module go.mod pins (the `tool` lines). */
const PROVISIONER_PACKAGE = 'github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner';
/** The snapshot sidecar and the cluster's snapshot controller, from external-snapshotter's module. */
const SNAPSHOTTER_PACKAGES = [
  'github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter',
  'github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller',
];
/** The cluster's one resizer, from external-resizer's module. */
const RESIZER_PACKAGE = 'github.com/kubernetes-csi/external-resizer/cmd/csi-resizer';

/** The paths of all the binaries, built together if the cache has none for these sources. */
export async function ensureClusterBinaries(log: Logger, cacheDir = defaultCacheDir(), signal?: AbortSignal): Promise<ClusterBinaries> {
  const dir = join(cacheDir, 'cluster', await sourceHash());
  const paths = Object.fromEntries(Object.entries(CLUSTER_BINARIES).map(([k, name]) => [k, join(dir, name)])) as ClusterBinaries;
  // vkvm-cluster is renamed into place last: its presence says the entry is whole.
  if (existsSync(paths.cluster)) return paths;
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.build-${process.pid}`);
  await rm(tmp, { recursive: true, force: true });
  log.info({ dir: CLUSTER_SOURCE_DIR }, 'building the control plane (first run only; several minutes on 2 cores)');
  const started = Date.now();
  // The release the components report (the kubelet's Node status, the API server's /version); Kubernetes' own
  // build stamps it the same way.
  const version = /kubernetesVersion = "v(\d+)\.(\d+)\.\d+"/.exec(await readFile(join(CLUSTER_SOURCE_DIR, 'version.go'), 'utf8'));
  if (!version) throw new Error('deploy/cluster/version.go names no kubernetesVersion');
  // Each sidecar logs its own release from main.version, so each module's commands are linked by a build of their
  // own (the packages they share are compiled once, in Go's build cache).
  const goMod = await readFile(join(CLUSTER_SOURCE_DIR, 'go.mod'), 'utf8');
  const stamp = `-X k8s.io/component-base/version.gitVersion=${version[0].split('"')[1]} -X k8s.io/component-base/version.gitMajor=${version[1]} -X k8s.io/component-base/version.gitMinor=${version[2]}`;
  const mainVersion = (module: string) => {
    const required = goMod.split('\n').find((line) => line.trim().startsWith(`${module} v`));
    if (!required) throw new Error(`deploy/cluster/go.mod requires no ${module}`);
    return `${stamp} -X main.version=${required.trim().split(' ')[1]}`;
  };
  const provisioner = mainVersion('github.com/kubernetes-csi/external-provisioner/v5');
  await goBuild(
    CLUSTER_SOURCE_DIR,
    [`-ldflags=${provisioner}`, '-o', `${tmp}/`, '.', './cmd/pause', PROVISIONER_PACKAGE],
    log,
    started,
    signal,
  );
  const snapshotter = mainVersion('github.com/kubernetes-csi/external-snapshotter/v8');
  await goBuild(CLUSTER_SOURCE_DIR, [`-ldflags=${snapshotter}`, '-o', `${tmp}/`, ...SNAPSHOTTER_PACKAGES], log, started, signal);
  const resizer = mainVersion('github.com/kubernetes-csi/external-resizer');
  await goBuild(CLUSTER_SOURCE_DIR, [`-ldflags=${resizer}`, '-o', `${tmp}/`, RESIZER_PACKAGE], log, started, signal);
  await goBuild(join(CLUSTER_SOURCE_DIR, 'coredns'), ['-o', join(tmp, 'coredns'), '.'], log, started, signal);
  // `go build -o dir/` names each binary after its package directory; the module's root is the control plane.
  await rename(join(tmp, 'coredns'), paths.coredns);
  await rename(join(tmp, 'pause'), paths.pause);
  await rename(join(tmp, 'csi-provisioner'), paths.provisioner);
  await rename(join(tmp, 'csi-snapshotter'), paths.snapshotter);
  await rename(join(tmp, 'snapshot-controller'), paths.snapshotController);
  await rename(join(tmp, 'csi-resizer'), paths.resizer);
  await rename(join(tmp, 'cluster'), paths.cluster);
  await rm(tmp, { recursive: true, force: true });
  log.info({ dir, elapsedS: Math.round((Date.now() - started) / 1000) }, 'control plane built');
  return paths;
}

/** `go build -v -trimpath ARGS` in `dir`, logging progress; rejects with its last lines. */
async function goBuild(dir: string, args: string[], log: Logger, started: number, signal?: AbortSignal): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    signal?.throwIfAborted();
    // Dies with this process (setpriv --pdeathsig): a build nobody waits for is minutes of two busy cores.
    const child = spawn('setpriv', ['--pdeathsig', 'KILL', '--', 'go', 'build', '-v', '-trimpath', ...args], {
      cwd: dir,
      stdio: ['ignore', 'inherit', 'pipe'],
      env: { ...process.env, CGO_ENABLED: '0' },
    });
    const onAbort = () => child.kill('SIGTERM');
    signal?.addEventListener('abort', onAbort, { once: true });
    child.on('exit', () => signal?.removeEventListener('abort', onAbort));
    let packages = 0;
    const tailLines: string[] = [];
    // `go build -v` names each package as it compiles: count them for progress.
    createInterface({ input: child.stderr! }).on('line', (line) => {
      tailLines.push(line);
      if (tailLines.length > 40) tailLines.shift();
      if (/^[\w.-]+(\/[\w.@~+-]+)*$/.test(line)) {
        packages++;
        if (packages % 200 === 0)
          log.info({ packages, elapsedS: Math.round((Date.now() - started) / 1000) }, 'control plane build progress');
      }
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code === 0) resolve();
      else reject(signal?.aborted ? signal.reason : new Error(`go build failed (exit ${code}):\n${tailLines.join('\n')}`));
    });
  });
}

/**
 * `n` distinct free ports on 127.0.0.1. Each is held open until all are
 * chosen: a listen on port 0 right after another's close can be handed the
 * same port again (a control plane once got one port for its apiserver and
 * its scheduler, and the scheduler never started).
 */
export async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Server>((resolve, reject) => {
          const srv = createServer();
          srv.unref();
          srv.on('error', reject);
          srv.listen(0, '127.0.0.1', () => resolve(srv));
        }),
    ),
  );
  const ports = servers.map((srv) => (srv.address() as AddressInfo).port);
  await Promise.all(servers.map((srv) => new Promise<void>((resolve) => srv.close(() => resolve()))));
  return ports;
}

export async function freePort(): Promise<number> {
  return (await freePorts(1))[0]!;
}

export interface ClusterPorts {
  apiserver: number;
  etcdClient: number;
  etcdPeer: number;
  controllerManager: number;
  scheduler: number;
}

export async function freeClusterPorts(): Promise<ClusterPorts> {
  const [apiserver, etcdClient, etcdPeer, controllerManager, scheduler] = (await freePorts(5)) as [number, number, number, number, number];
  return { apiserver, etcdClient, etcdPeer, controllerManager, scheduler };
}

export const DEFAULT_PORTS: ClusterPorts = {
  apiserver: 6443,
  etcdClient: 2379,
  etcdPeer: 2380,
  controllerManager: 10257,
  scheduler: 10259,
};

export interface ClusterOptions {
  stateDir: string;
  ports?: ClusterPorts;
  nodeMonitorGracePeriodS?: number;
  /** Pod network of the cluster; each node gets a /24 of it as spec.podCIDR. */
  clusterCidr?: string;
  /** Where the apiserver, controller manager and scheduler listen (default 127.0.0.1); in the certificates and kubeconfigs. */
  bindAddress?: string;
  /** Tests trade durability for speed. */
  unsafeNoFsync?: boolean;
  /** Aborting it during start-up stops what started and rejects with its reason; afterwards, stop() does. */
  signal?: AbortSignal;
  log: Logger;
}

export interface RunningCluster {
  kubeconfigPath: string;
  binary: string;
  pid: number;
  /** Run the bundled kubectl (same Kubernetes release) against this cluster. */
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number }): Promise<{ stdout: string; stderr: string; code: number }>;
  stop(): Promise<void>;
  exited: Promise<number | null>;
}

export async function startCluster(opts: ClusterOptions): Promise<RunningCluster> {
  const binary = await ensureClusterBinary(opts.log, defaultCacheDir(), opts.signal);
  opts.signal?.throwIfAborted();
  const ports = opts.ports ?? DEFAULT_PORTS;
  const args = [
    'up',
    `--state-dir=${opts.stateDir}`,
    `--apiserver-port=${ports.apiserver}`,
    `--etcd-client-port=${ports.etcdClient}`,
    `--etcd-peer-port=${ports.etcdPeer}`,
    `--controller-manager-port=${ports.controllerManager}`,
    `--scheduler-port=${ports.scheduler}`,
  ];
  if (opts.nodeMonitorGracePeriodS) args.push(`--node-monitor-grace-period=${opts.nodeMonitorGracePeriodS}s`);
  if (opts.unsafeNoFsync) args.push('--etcd-unsafe-no-fsync');
  if (opts.clusterCidr) args.push(`--cluster-cidr=${opts.clusterCidr}`);
  if (opts.bindAddress) args.push(`--bind-address=${opts.bindAddress}`);
  // Keys and etcd's data: root's alone (vkvm-cluster tightens what is inside).
  await mkdir(opts.stateDir, { recursive: true, mode: 0o700 });
  await chmod(opts.stateDir, 0o700);
  // Its own process group, so stop() can reach every component it started and
  // a Ctrl-C reaches only vkvm, which stops things in order. It dies with this
  // process however that dies (setpriv --pdeathsig; setpriv execs in place):
  // SIGTERM, so it still stops its components and etcd cleanly.
  const child: ChildProcess = spawn('setpriv', ['--pdeathsig', 'TERM', '--', binary, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const pid = child.pid!;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    try {
      process.kill(-pid, 'SIGTERM');
    } catch {
      return;
    }
    const timer = setTimeout(() => {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, 30_000);
    await exited;
    clearTimeout(timer);
  };
  const stderrTail: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (line) => {
    stderrTail.push(line);
    if (stderrTail.length > 60) stderrTail.shift();
    opts.log.debug({ component: 'vkvm-cluster' }, line);
  });
  const onAbort = () => void stop();
  opts.signal?.addEventListener('abort', onAbort, { once: true });
  const kubeconfigPath = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /^vkvm-cluster: ready kubeconfig=(.+)$/.exec(line);
      if (m?.[1]) resolve(m[1]);
    });
    void exited.then((code) =>
      reject(
        opts.signal?.aborted
          ? opts.signal.reason
          : new Error(`control plane exited (code ${code}) before becoming ready:\n${stderrTail.join('\n')}`),
      ),
    );
  }).finally(() => opts.signal?.removeEventListener('abort', onAbort));
  const kubectl: RunningCluster['kubectl'] = (kargs, kopts = {}) =>
    new Promise((resolve, reject) => {
      const p = spawn(binary, ['kubectl', `--kubeconfig=${kubeconfigPath}`, ...kargs], { stdio: ['pipe', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => p.kill('SIGKILL'), kopts.timeoutMs ?? 60_000);
      p.on('error', reject);
      p.on('close', (code) => {
        clearTimeout(timer);
        resolve({ stdout, stderr, code: code ?? -1 });
      });
      p.stdin.end(kopts.input ?? '');
    });
  return { kubeconfigPath, binary, pid, kubectl, stop, exited };
}

// The init process of one container node of `vkvm up --container-nodes M`:
// an ordinary Kubernetes node on a simulated host (its own network namespace
// on the nodes' segment, as a vkvm node has). vkvm up starts it inside the
// namespace (`ip netns exec`, which also gives it a mount namespace). It
//   1. gives the host its own view: its hostname, this machine's cgroup
//      hierarchies, empty tmpfs over the host-wide paths its components write
//      (/run/netns, /var/lib/cni, /var/log/containers), IP forwarding on;
//   2. starts containerd (Debian's, with runc) with the node's config, and
//      imports the local images (pause, CoreDNS, toolbox) from their layout;
//   3. starts the real kubelet, which joins by TLS bootstrap with a bootstrap
//      token as `vkvm join` does, and waits for the Node's podCIDR;
//   4. starts flanneld (host-gw), and once it wrote the node's lease writes
//      the CNI network (bridge + host-local on that lease); then kube-proxy
//      with the cluster's configuration;
//   5. on SIGTERM or SIGINT, stops the kubelet, kube-proxy and flanneld, kills what its
//      cgroup subtree still holds (containerd, shims, pods) and removes the
//      node's directories. Its mounts and pod namespaces go with its mount
//      namespace; its interfaces, routes and rules with the network namespace
//      vkvm up then deletes.
// Its log (JSON lines on stdout) tells vkvm up: CONTAINER_NODE_READY once the CNI network is written.
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync } from 'node:fs';
import { access, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { initLogger, runIfProgram } from './init-log.js';
import type { Logger } from '../log.js';
import { run } from '../network/host.js';
import { mountsBelow } from '../host-mounts.js';
import { restoreCgroupMounts } from './cgroup-mounts.js';
import {
  bootstrapKubeconfig,
  bootstrapKubeconfigPath,
  cniConfDir,
  cniConfList,
  containerdConfig,
  containerdSocket,
  flannelNetConf,
  flannelSubnetFile,
  kubeletConfig,
  kubeletKubeconfig,
  kubeletRootDir,
  parseSubnetEnv,
} from './container-node-config.js';
import { CONTAINER_NODE_READY, type ContainerNodeSpec } from './container-node-spec.js';
import { hostKubeProxyConfig } from '../cluster-services/kube-proxy-config.js';
import { enterNodeCgroup, nodeCgroupOf, podsCgroup, removeNodeCgroup } from './node-cgroup.js';

/** Host-wide paths the components write whatever their flags say; each node gets an empty one. */
const PRIVATE_PATHS = ['/run/netns', '/var/lib/cni', '/var/log/containers'];
const STEP_TIMEOUT_MS = 180_000;
/**
 * The kernel settings the kubelet sets when they differ (kubelet
 * cm.setupKernelTunables). They are the machine's, not the node's (panic on
 * oops would reboot every node of the machine), so the node sees files that
 * already hold these values bound over them.
 */
const KUBELET_SYSCTLS: Record<string, string> = {
  'vm/overcommit_memory': '1',
  'vm/panic_on_oom': '0',
  'kernel/panic': '10',
  'kernel/panic_on_oops': '1',
  'kernel/keys/root_maxkeys': '1000000',
  'kernel/keys/root_maxbytes': '25000000',
};

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/** Waits for `check` to hold, polling; rejects after `timeoutMs` or when `died` settles first. */
async function waitFor(what: string, check: () => Promise<boolean>, died: Promise<string>, timeoutMs = STEP_TIMEOUT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let dead: string | undefined;
  void died.then((why) => (dead = why));
  while (!(await check())) {
    if (dead) throw new Error(`${what}: ${dead}`);
    if (Date.now() > deadline) throw new Error(`${what}: not after ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

interface Daemon {
  child: ChildProcess;
  /** Settles with a description when it exits. */
  died: Promise<string>;
}

/** Starts `cmd` with its output in <rootDir>/logs/<name>.log. */
function startDaemon(spec: ContainerNodeSpec, name: string, cmd: string, args: string[], env?: NodeJS.ProcessEnv): Daemon {
  const out = openSync(join(spec.rootDir, 'logs', `${name}.log`), 'a');
  const child = spawn(cmd, args, { stdio: ['ignore', out, out], env: env ?? process.env });
  const died = new Promise<string>((resolve) =>
    child.once('exit', (code, signal) => resolve(`${name} exited (${code ?? signal}); see ${spec.rootDir}/logs/${name}.log`)),
  );
  return { child, died };
}

async function stopDaemon(d: Daemon | undefined, timeoutMs = 30_000): Promise<void> {
  if (!d || d.child.exitCode !== null || d.child.signalCode !== null) return;
  d.child.kill('SIGTERM');
  const timer = setTimeout(() => d.child.kill('SIGKILL'), timeoutMs);
  await d.died;
  clearTimeout(timer);
}

/** Step 1. */
async function privateView(spec: ContainerNodeSpec): Promise<void> {
  await run(['hostname', spec.name]);
  await run(['mount', '--make-rprivate', '/']);
  await restoreCgroupMounts(spec.cgroups);
  for (const path of PRIVATE_PATHS) {
    await mkdir(path, { recursive: true, mode: 0o755 });
    await run(['mount', '-t', 'tmpfs', '-o', 'mode=0755,size=64m', 'vkvm-cnode', path]);
  }
  // A new network namespace starts with forwarding off; a node routes its pods' traffic.
  await writeFile('/proc/sys/net/ipv4/ip_forward', '1');
  for (const dir of [spec.rootDir, join(spec.rootDir, 'logs'), cniConfDir(spec), kubeletRootDir(spec), spec.runDir])
    await mkdir(dir, { recursive: true, mode: 0o700 });
  await mkdir(join(spec.runDir, 'sysctl'), { recursive: true });
  for (const [name, value] of Object.entries(KUBELET_SYSCTLS)) {
    const file = join(spec.runDir, 'sysctl', name.replaceAll('/', '.'));
    await writeFile(file, `${value}\n`);
    await run(['mount', '--bind', file, `/proc/sys/${name}`]);
  }
}

/** `ctr images import` of the local images' layout (ctr reads an archive: the layout's directory as a tar stream). */
async function importImages(spec: ContainerNodeSpec): Promise<void> {
  const tar = spawn('tar', ['-C', spec.imagesLayout, '-cf', '-', '.'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const ctr = spawn('ctr', ['--address', containerdSocket(spec), '-n', 'k8s.io', 'images', 'import', '--no-unpack=false', '-'], {
    stdio: [tar.stdout!, 'pipe', 'pipe'],
  });
  let output = '';
  for (const s of [ctr.stdout!, ctr.stderr!, tar.stderr!]) s.on('data', (d: Buffer) => (output += d.toString()));
  const [tarCode, ctrCode] = await Promise.all([tar, ctr].map((p) => new Promise<number | null>((r) => p.once('exit', r))));
  if (tarCode !== 0 || ctrCode !== 0)
    throw new Error(`importing the local images failed (tar ${tarCode}, ctr ${ctrCode}): ${output.trim()}`);
}

/** The Node's spec.podCIDR as its kubelet's credentials read it; '' until the controller manager assigned one. */
async function podCidrOf(spec: ContainerNodeSpec): Promise<string> {
  const child = spawn(
    spec.binary,
    ['kubectl', `--kubeconfig=${kubeletKubeconfig(spec)}`, 'get', 'node', spec.name, '-o', 'jsonpath={.spec.podCIDR}'],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((r) => child.once('exit', r));
  return code === 0 ? out.trim() : '';
}

interface Running {
  containerd?: Daemon;
  kubelet?: Daemon;
  flanneld?: Daemon;
  kubeProxy?: Daemon;
}

/** Steps 2-4. */
async function startNode(spec: ContainerNodeSpec, r: Running, log: Logger): Promise<void> {
  await writeFile(join(spec.rootDir, 'containerd.toml'), containerdConfig(spec, { sandboxImage: spec.pauseImage }));
  r.containerd = startDaemon(spec, 'containerd', 'containerd', ['--config', join(spec.rootDir, 'containerd.toml')]);
  await waitFor('containerd', () => exists(containerdSocket(spec)), r.containerd.died);
  await importImages(spec);
  log.info('containerd is up with the local images');

  const caFile = join(spec.rootDir, 'ca.crt');
  await writeFile(caFile, Buffer.from(spec.caData, 'base64'));
  await writeFile(bootstrapKubeconfigPath(spec), bootstrapKubeconfig(spec), { mode: 0o600 });
  const config = kubeletConfig(spec, {
    clusterDns: spec.clusterDns,
    clusterDomain: spec.clusterDomain,
    cgroupRoot: podsCgroup(nodeCgroupOf(spec.cgroupBase, spec.cgroups)),
    clientCaFile: caFile,
  });
  await writeFile(join(spec.rootDir, 'kubelet.yaml'), config);
  r.kubelet = startDaemon(spec, 'kubelet', spec.binary, [
    'kubelet',
    `--config=${join(spec.rootDir, 'kubelet.yaml')}`,
    `--bootstrap-kubeconfig=${bootstrapKubeconfigPath(spec)}`,
    `--kubeconfig=${kubeletKubeconfig(spec)}`,
    `--cert-dir=${join(spec.rootDir, 'pki')}`,
    `--root-dir=${kubeletRootDir(spec)}`,
    `--hostname-override=${spec.name}`,
    `--node-ip=${spec.address}`,
    `--v=${spec.logLevel === 'debug' ? 4 : 1}`,
  ]);
  await waitFor('the kubelet’s TLS bootstrap', () => exists(kubeletKubeconfig(spec)), r.kubelet.died);
  await waitFor('the Node’s podCIDR', async () => (await podCidrOf(spec)) !== '', r.kubelet.died);
  log.info('the kubelet joined');

  const netConf = join(spec.rootDir, 'net-conf.json');
  await writeFile(netConf, flannelNetConf(spec.clusterCidr));
  r.flanneld = startDaemon(spec, 'flanneld', spec.binary, [
    'flanneld',
    `--kubeconfig=${kubeletKubeconfig(spec)}`,
    `--node-name=${spec.name}`,
    `--iface=${spec.address}`,
    `--net-conf=${netConf}`,
    `--subnet-file=${flannelSubnetFile(spec)}`,
  ]);
  await waitFor('flannel’s lease', () => exists(flannelSubnetFile(spec)), r.flanneld.died);
  const lease = parseSubnetEnv(await readFile(flannelSubnetFile(spec), 'utf8'));
  await writeFile(join(cniConfDir(spec), '10-vkvm-flannel.conflist'), cniConfList(spec, lease));
  log.info({ subnet: lease.subnet }, 'flannel routes the node’s pod range');

  // As a kubeadm cluster's DaemonSet would run it, with the node's credentials; its rules go with the namespace.
  const kubeProxyConfig = join(spec.rootDir, 'kube-proxy.yaml');
  await writeFile(kubeProxyConfig, hostKubeProxyConfig(spec.kubeProxyConfig, { kubeconfig: kubeletKubeconfig(spec), nodeName: spec.name }));
  r.kubeProxy = startDaemon(spec, 'kube-proxy', spec.binary, ['kube-proxy', `--config=${kubeProxyConfig}`, '--v=1']);
}

/** Step 5. */
async function stopNode(spec: ContainerNodeSpec, r: Running, log: Logger): Promise<void> {
  await stopDaemon(r.kubelet);
  await stopDaemon(r.kubeProxy);
  await stopDaemon(r.flanneld);
  await stopDaemon(r.containerd);
  await removeNodeCgroup(nodeCgroupOf(spec.cgroupBase, spec.cgroups), process.pid);
  // Containers' root filesystems, pods' volumes and sandboxes' /dev/shm are mounts below the node's directories
  // in this mount namespace: they would go with it, but the directories must go first.
  // One a lazy unmount above it took already fails; the rm below says if anything is still mounted.
  for (const mountPoint of await mountsBelow([spec.rootDir, spec.runDir])) await run(['umount', '-l', mountPoint]).catch(() => undefined);
  for (const dir of [spec.rootDir, spec.runDir]) await rm(dir, { recursive: true, force: true });
  log.info('stopped; the node’s state is removed');
}

async function main(): Promise<number> {
  if (!process.argv[2]) {
    process.stderr.write('container-node.js is started by vkvm up --container-nodes, with its spec as JSON\n');
    return 2;
  }
  const spec = JSON.parse(process.argv[2]) as ContainerNodeSpec;
  const log = initLogger({ component: 'container-node', node: spec.name, level: spec.logLevel });
  const running: Running = {};
  let stopping: Promise<void> | undefined;
  const stop = () => (stopping ??= stopNode(spec, running, log));
  const alive = setInterval(() => undefined, 2 ** 30);
  const stopped = new Promise<void>((resolve) => {
    for (const signal of ['SIGTERM', 'SIGINT'] as const)
      process.on(
        signal,
        () =>
          void stop()
            .catch((err: unknown) => log.error({ err }, 'the container node could not stop cleanly'))
            .finally(resolve),
      );
  });
  try {
    await privateView(spec);
    await enterNodeCgroup(nodeCgroupOf(spec.cgroupBase, spec.cgroups), process.pid);
    await startNode(spec, running, log);
    if (!stopping) log.info(CONTAINER_NODE_READY);
  } catch (err) {
    log.error({ err }, 'the container node could not start');
    await stop().catch((e: unknown) => log.error({ err: e }, 'the container node could not stop cleanly'));
    return 1;
  }
  await stopped;
  clearInterval(alive);
  return 0;
}

// Only as a program: importing this module must not run a node.
runIfProgram(import.meta.url, main);

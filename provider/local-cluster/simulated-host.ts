// The init process of one simulated host of `vkvm up --nodes N` (what a
// kind node container's entrypoint is). vkvm up starts it inside the host's
// network namespace (`ip netns exec`, which also gives it a mount namespace
// of its own). It
//   1. hides this machine's other vkvm state from the host: node 1's state,
//      run and cache dirs (and so every other node's, which live below them)
//      and the host's network namespace files, under empty tmpfs mounts,
//      then mounts its own directories back, and the control plane's
//      binaries read-only (its kube-proxy);
//   2. joins the cluster exactly as an operator's host does: `vkvm join`
//      with the command `vkvm token create` printed, which starts the node
//      agent as a detached process (inheriting both namespaces);
//   3. on SIGTERM or SIGINT, stops the agent, powers its VMs off and removes
//      its pod network and VM cgroups, then exits; the Node and the node's
//      credentials stay, so the next vkvm up re-joins with them;
//   4. on SIGHUP, restarts the agent as an operator would on a real host
//      (`systemctl restart vkvm`, or re-running the idempotent `vkvm join`,
//      which stops the running agent and starts it again, its VMs running on).
// Its log (JSON lines on stdout) tells vkvm up: JOINED_MESSAGE once joined,
// AGENT_RESTARTED_MESSAGE after each SIGHUP's restart.
import { spawn } from 'node:child_process';
import { openSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { run } from '../network/host.js';
import { cliPath } from '../package-root.js';
import { initLogger, runIfProgram } from './init-log.js';
import type { Logger } from '../log.js';
import { restoreCgroupMounts } from './cgroup-mounts.js';
import { AGENT_RESTARTED_MESSAGE, JOINED_MESSAGE, type SimulatedHostSpec } from './host-spec.js';

/** Where `ip netns add` keeps namespaces (vm-network.ts's NETNS_DIR; not imported, to keep the init small). */
const NETNS_DIR = '/run/netns';
/** Where `mount` finds the directory it is handed. */
const MOUNT_FD = 3;

/** Runs `mount` with `fd` as its MOUNT_FD (so /proc/self/fd/3 names a directory hidden since it was opened). */
function mountWithFd(args: string[], fd?: number): Promise<void> {
  const child = spawn('mount', args, { stdio: ['ignore', 'ignore', 'pipe', ...(fd === undefined ? [] : [fd])] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`mount ${args.join(' ')} failed (${code}): ${stderr.trim()}`)),
    ),
  );
}

const isInside = (path: string, dir: string) => path === dir || path.startsWith(dir.endsWith('/') ? dir : `${dir}/`);

/** The host's private view of this machine's files (step 1). */
async function hideTheRest(spec: SimulatedHostSpec): Promise<void> {
  // A host name of its own: the node's Hostname address and its serving certificate's DNS name.
  await run(['hostname', spec.name]);
  await run(['mount', '--make-rprivate', '/']);
  await restoreCgroupMounts(spec.cgroups);
  // The libvirt cache the launchers make themselves, root-only.
  for (const dir of [spec.stateDir, spec.imageCacheDir]) await mkdir(dir, { recursive: true, mode: 0o711 });
  await mkdir(spec.runDir, { recursive: true, mode: 0o700 });
  const own = [
    ...[spec.rootDir, spec.runDir].map((dir) => ({ dir, fd: openSync(dir, 'r'), readOnly: false })),
    ...spec.shared.map((dir) => ({ dir, fd: openSync(dir, 'r'), readOnly: true })),
  ];
  // Outermost first; one inside a hidden path is hidden with it.
  const masks: string[] = [];
  for (const path of [...new Set([...spec.hidden, NETNS_DIR])].sort((a, b) => a.length - b.length)) {
    if (masks.some((m) => isInside(path, m))) continue;
    await mkdir(path, { recursive: true, mode: 0o711 });
    await run(['mount', '-t', 'tmpfs', '-o', 'mode=0711,size=16m', 'vkvm-hidden', path]);
    masks.push(path);
  }
  for (const { dir, fd, readOnly } of own) {
    await mkdir(dir, { recursive: true, mode: 0o711 });
    // Not canonicalized: the link's path is the hidden one; the open directory is what is meant.
    await mountWithFd(['--no-canonicalize', '-o', readOnly ? 'bind,ro' : 'bind', `/proc/self/fd/${MOUNT_FD}`, dir], fd);
  }
}

/** `vkvm join` to its end; rejects with its output when it fails. */
function join(spec: SimulatedHostSpec, log: Logger, onChild: (kill: () => void) => void): Promise<void> {
  const args = [
    cliPath(),
    'join',
    ...spec.joinArgs,
    '--no-systemd',
    `--node-name=${spec.name}`,
    `--state-dir=${spec.stateDir}`,
    `--run-dir=${spec.runDir}`,
    `--image-cache-dir=${spec.imageCacheDir}`,
    `--libvirt-cache-dir=${spec.libvirtCacheDir}`,
    `--cgroup-parent=${spec.cgroupParent}`,
    `--log-level=${spec.logLevel}`,
    ...spec.agentArgs,
  ];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  onChild(() => child.kill('SIGTERM'));
  let output = '';
  for (const s of [child.stdout, child.stderr]) s.on('data', (d: Buffer) => (output += d.toString()));
  return new Promise((resolve, reject) =>
    child.once('exit', (code, signal) => {
      log.info({ code, signal, output: output.trim() }, 'vkvm join ended');
      if (code === 0) resolve();
      else reject(new Error(`vkvm join exited (${code ?? signal}): ${output.trim()}`));
    }),
  );
}

/**
 * Step 3: what a host's shutdown does to its VMs, here before the namespaces
 * go. What it needs loads only now: the init idles for as long as the node
 * runs, and the launcher registry was half of its memory.
 */
async function stopHost(spec: SimulatedHostSpec, log: Logger): Promise<void> {
  const [{ stopDetachedAgent }, { stopNodeWorkloads }, { Cgroup }, { DEFAULT_BRIDGE }] = await Promise.all([
    import('../join/service.js'),
    import('../join/reset.js'),
    import('../../launcher/agent-api.js'),
    import('../network/pod-network.js'),
  ]);
  await stopDetachedAgent(spec.stateDir, log);
  await stopNodeWorkloads(
    {
      stateDir: spec.stateDir,
      runDir: spec.runDir,
      imageCacheDir: spec.imageCacheDir,
      bridge: DEFAULT_BRIDGE,
      cgroupParent: spec.cgroupParent,
      ...(spec.storage ? { csi: { nodeName: spec.name } } : {}),
    },
    spec.gracePeriodS,
    log,
  );
  // The node's own cgroup parent, <parent of parent>/<name>, now empty.
  const slash = spec.cgroupParent.lastIndexOf('/');
  if (slash > 0) await Cgroup.removeLeftover({ parent: spec.cgroupParent.slice(0, slash), uid: spec.cgroupParent.slice(slash + 1) });
}

async function main(): Promise<number> {
  if (!process.argv[2]) {
    process.stderr.write('simulated-host.js is started by vkvm up --nodes, with its spec as JSON\n');
    return 2;
  }
  const spec = JSON.parse(process.argv[2]) as SimulatedHostSpec;
  const log = initLogger({ component: 'simulated-host', node: spec.name, level: spec.logLevel });
  let killJoin: (() => void) | undefined;
  let stopping: Promise<void> | undefined;
  let storage: { stop(): Promise<void> } | undefined;
  const stop = () => {
    killJoin?.();
    stopping ??= (async () => {
      // The driver outlives the VMs: stopHost takes their volumes down through it.
      try {
        await stopHost(spec, log);
      } finally {
        await storage?.stop().catch((err: unknown) => log.error({ err }, 'stopping the CSI driver and provisioner failed'));
      }
    })();
    return stopping;
  };
  // Signal handlers alone do not keep node running.
  const alive = setInterval(() => undefined, 2 ** 30);
  const stopped = new Promise<void>((resolve) => {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => void stop().finally(resolve));
  });
  let restarting: Promise<void> | undefined;
  process.on('SIGHUP', () => {
    if (stopping || restarting || killJoin) return;
    restarting = join(spec, log, (kill) => (killJoin = kill))
      .then(() => log.info(AGENT_RESTARTED_MESSAGE))
      .catch((err: unknown) => log.error({ err }, 'restarting the node agent failed'))
      .finally(() => {
        killJoin = undefined;
        restarting = undefined;
      });
  });
  try {
    await hideTheRest(spec);
    await join(spec, log, (kill) => (killJoin = kill));
    killJoin = undefined;
    // Loaded only now, as stopHost's modules are: the init stays small for nodes without storage.
    if (spec.storage && !stopping) {
      const started = await (await import('../node-storage/node-storage.js')).startNodeStorage(spec.storage, log);
      // A stop that came meanwhile found nothing to stop.
      if (stopping) await started.stop();
      else storage = started;
    }
    if (!stopping) log.info(JOINED_MESSAGE);
  } catch (err) {
    log.error({ err }, 'the simulated host could not join');
    await stop();
    return 1;
  }
  await stopped;
  clearInterval(alive);
  log.info('stopped');
  return 0;
}

// Only as a program: importing this module must not run a node.
runIfProgram(import.meta.url, main);

// A real control plane (deploy/cluster) and one vkvm node agent, the built CLI
// as a child process, for benchmarks that go through kube-apiserver. Like
// the e2e framework's (test/e2e/framework/) but without tap: every part registers its removal with
// the bench context before it is created, and the removal runs however the
// benchmark ends: pods force-deleted and the namespace deleted, the agent
// SIGKILLed, any launcher left killed with its QEMU (killLaunchersOf), the
// control plane stopped, the temp dirs removed.
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { chmod, mkdtemp, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pino } from 'pino';
import { freeClusterPorts, freePort, startCluster, type RunningCluster } from '../../deploy/cluster/cluster.js';
import { CLI, killLaunchersOf, removeNetworkOf } from '../e2e/framework/agent.js';
import { condition, waitFor } from '../e2e/framework/wait.js';
import { nodes } from '../e2e/framework/watched.js';
import { loadKubeConfig, makeClients, type KubeClients } from '../../provider/kube/client.js';
import { importTestGuest } from '../../provider/images/test-guest-images.js';
import { agentProfileNodeArgs, inspectorUrl } from './agent-profile.js';
import { until, type BenchContext } from './bench.js';

/** How long the removal waits for the agent to stop the VMs of force-deleted pods before it kills what is left. */
const DRAIN_TIMEOUT_MS = 60_000;

export interface BenchNode {
  cluster: RunningCluster;
  clients: KubeClients;
  nodeName: string;
  namespace: string;
  agentPid: number;
  /** The agent's --state-dir; VM directories are <agentStateDir>/vms/<pod uid>. */
  agentStateDir: string;
  /** Its pod network's bridge. */
  bridge: string;
  /** The agent's log lines so far (pino JSON, stdout and stderr). */
  agentOutput: string[];
  /** The agent's inspector (DevTools protocol), when BENCH_AGENT_CPU_PROFILE asked for one (agent-profile.ts). */
  agentInspector?: string;
  /** The bundled kubectl in the benchmark's namespace. */
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number }): ReturnType<RunningCluster['kubectl']>;
}

/** The control plane's own logger: to stderr, which carries the bench's progress (stdout is for figures). */
const clusterLog = pino({ level: 'info', base: { component: 'bench-cluster' } }, pino.destination(2));

/** Runs `fn` and logs instead of throwing: one failed removal step must not skip the next. */
async function bestEffort(ctx: BenchContext, what: string, fn: () => Promise<unknown>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    ctx.log(`${what} failed (going on): ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function startControlPlane(ctx: BenchContext): Promise<RunningCluster> {
  const stateDir = await mkdtemp('/tmp/vkvm-bc-');
  const starting = startCluster({ stateDir, ports: await freeClusterPorts(), unsafeNoFsync: true, log: clusterLog });
  ctx.defer('control plane', async () => {
    // A start in flight either becomes ready or exits; either way there is something to stop or nothing left.
    const c = await starting.catch(() => undefined);
    await c?.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
  const t0 = performance.now();
  const cluster = await starting;
  ctx.log(`control plane ready in ${Math.round(performance.now() - t0)} ms (pid ${cluster.pid})`);
  return cluster;
}

/** `vkvm node` from the built CLI, as the e2e framework's startAgent starts it; resolves on its "node agent running" line. */
async function startAgentProcess(
  ctx: BenchContext,
  kubeconfigPath: string,
  nodeName: string,
  extraArgs: string[],
  nodeOptions: string[],
): Promise<{ pid: number; stateDir: string; bridge: string; output: string[]; inspector?: string }> {
  // Short: launcher sockets go below it and unix socket paths must stay under 108 bytes.
  const stateDir = await mkdtemp('/tmp/vkvm-bp-');
  // mkdtemp makes it 0700; QEMU (unprivileged) must reach the VM disks below it.
  await chmod(stateDir, 0o711);
  // The test guest's images, as `vkvm up` and the e2e agents have them.
  await importTestGuest(join(stateDir, 'images'));
  const kubeletPort = await freePort();
  const output: string[] = [];
  const bridge = `vkb${randomBytes(4).toString('hex')}`;
  const child = spawn(
    process.execPath,
    [
      ...nodeOptions,
      ...agentProfileNodeArgs(),
      CLI,
      'node',
      `--kubeconfig=${kubeconfigPath}`,
      `--node-name=${nodeName}`,
      `--kubelet-port=${kubeletPort}`,
      `--state-dir=${stateDir}`,
      `--run-dir=${join(stateDir, 'run')}`,
      '--healthz-port=0',
      '--approve-serving-csr',
      `--bridge=${bridge}`,
      ...extraArgs,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  ctx.defer('node agent and its launchers', async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    // SIGKILL of a launcher takes its QEMU with it; the cgroups go too.
    await killLaunchersOf(stateDir);
    await removeNetworkOf(stateDir, bridge);
    await rm(stateDir, { recursive: true, force: true });
  });
  const logFile = createWriteStream(join(stateDir, 'agent.log'), { flags: 'a' });
  let inspector: string | undefined;
  const running = new Promise<void>((resolve, reject) => {
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on('line', (line) => {
        inspector ??= inspectorUrl(line);
        output.push(line);
        logFile.write(line + '\n');
        if (line.includes('"node agent running"')) resolve();
      });
    }
    void exited.then(() =>
      reject(new Error(`node agent exited (${child.exitCode ?? child.signalCode}) before running:\n${output.slice(-40).join('\n')}`)),
    );
  });
  await running;
  return { pid: child.pid!, stateDir, bridge, output, ...(inspector ? { inspector } : {}) };
}

/**
 * Starts a control plane, a node agent for `nodeName` and the namespace, and
 * waits until the node is Ready (so the scheduler places the first pod at once).
 * `nodeOptions` go to the agent's Node before its script; `drainTimeoutMs` is
 * how long the removal waits for the agent to stop the VMs (more VMs, longer).
 */
export async function startBenchNode(
  ctx: BenchContext,
  opts: { nodeName: string; namespace: string; extraArgs?: string[]; nodeOptions?: string[]; drainTimeoutMs?: number },
): Promise<BenchNode> {
  const cluster = await startControlPlane(ctx);
  const clients = makeClients(loadKubeConfig(cluster.kubeconfigPath));
  const agent = await startAgentProcess(ctx, cluster.kubeconfigPath, opts.nodeName, opts.extraArgs ?? [], opts.nodeOptions ?? []);
  await waitFor(nodes(clients, { name: opts.nodeName }), (n) => condition(n, 'Ready') === 'True', { what: 'Ready' });
  const namespace = opts.namespace;
  ctx.defer(`namespace ${namespace}`, async () => {
    // Force-deleted pods leave the API at once; the agent then destroys their VMs (grace 0).
    await bestEffort(ctx, 'deleting the pods', () => clients.core.deleteCollectionNamespacedPod({ namespace, gracePeriodSeconds: 0 }));
    await bestEffort(ctx, 'deleting the namespace', () => clients.core.deleteNamespace({ name: namespace }));
    const vmsDir = join(agent.stateDir, 'vms');
    // Whatever the agent has not removed by then, the agent's removal kills.
    await bestEffort(ctx, 'waiting for the agent to remove the VMs', () =>
      until(
        'the agent removed every VM',
        async () => (await readdir(vmsDir).catch(() => [])).length === 0,
        opts.drainTimeoutMs ?? DRAIN_TIMEOUT_MS,
        new AbortController().signal,
      ),
    );
  });
  await clients.core.createNamespace({ body: { metadata: { name: namespace } } });
  ctx.log(`node agent ${opts.nodeName} running (state ${agent.stateDir}); namespace ${namespace} created`);
  return {
    cluster,
    clients,
    nodeName: opts.nodeName,
    namespace,
    agentPid: agent.pid,
    agentStateDir: agent.stateDir,
    bridge: agent.bridge,
    agentOutput: agent.output,
    ...(agent.inspector ? { agentInspector: agent.inspector } : {}),
    kubectl: (args, kopts) => cluster.kubectl(['-n', namespace, ...args], kopts),
  };
}

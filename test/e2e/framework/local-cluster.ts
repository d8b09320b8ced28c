// A multi-node local cluster for e2e tests: `vkvm up --nodes N` run as the
// README runs it (npm start, in its own process group as a terminal's
// foreground job), its nodes with their names and addresses, and a way to
// run a command "on" a node: in the host's namespaces for node 1, in a
// simulated host's network, mount and UTS namespaces for the others; and
// what a node made for one pod's VM.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import { ensureClusterBinary, freePort } from '../../../deploy/cluster/cluster.js';
import { loadKubeConfig, makeClients, type KubeClients } from '../../../provider/kube/client.js';
import { DEFAULT_NODES_CIDR, localNodes, segmentOf, type LocalNode } from '../../../provider/local-cluster/layout.js';
import { vmNetworkNames } from '../../../provider/network/vm-network.js';
import { packageRoot } from '../../../provider/package-root.js';
import { argvOf, pidsWhere } from '../../helpers/processes.js';
import { poll } from './wait.js';
import { testLog } from './cluster.js';
import { runCommand, type CommandResult } from './commands.js';

export interface UpNode {
  name: string;
  /** Its address on the nodes' segment: its InternalIP. */
  address: string;
  /** Node 1 is this host; the others are simulated hosts. */
  simulated?: LocalNode;
  /** An ordinary node (containerd and the kubelet) of --container-nodes. */
  container?: boolean;
  /** Runs `argv` on the node, as root there. */
  exec(argv: string[]): Promise<CommandResult>;
  /**
   * A simulated vkvm node's agent restarted as an operator restarts it (its init re-runs the idempotent
   * vkvm join on SIGHUP: simulated-host.ts); resolves once another agent process runs. Its VMs run on.
   */
  restartAgent?(): Promise<void>;
}

export interface UpCluster {
  stateDir: string;
  /** Node 1's pod network bridge (the simulated hosts' are in their own namespaces). */
  bridge: string;
  kubeconfigPath: string;
  /** The control plane's binary (`<binary> kubectl …`). */
  binary: string;
  clients: KubeClients;
  nodes: UpNode[];
  /** Everything vkvm up printed so far. */
  output: string[];
  /** kubectl with `kubeconfig` (default the admin's). */
  kubectl(args: string[], kubeconfig?: string): Promise<CommandResult>;
  /**
   * A terminal's Ctrl-C: SIGINT to the foreground process group. Resolves
   * once vkvm up and everything mentioning its state dir exited (npm may exit
   * first), with what is still running after the deadline.
   */
  interrupt(): Promise<string[]>;
}

const UP_TIMEOUT_MS = 600_000;
const STOP_TIMEOUT_MS = 180_000;

/** The init process of a simulated host (provider/local-cluster/simulated-host.ts, or container-node.ts). */
function simulatedHostPid(name: string): number | undefined {
  return pidsWhere(
    (argv) =>
      argv.some((a) => a.endsWith('simulated-host.js') || a.endsWith('container-node.js')) &&
      argv.some((a) => a.includes(`"name":"${name}"`)),
  )[0];
}

function nodeExec(node: LocalNode | undefined): (argv: string[]) => Promise<CommandResult> {
  if (!node) return (argv) => runCommand(argv[0]!, argv.slice(1));
  return (argv) => {
    const pid = simulatedHostPid(node.name);
    if (pid === undefined) return Promise.resolve({ code: null, stdout: '', stderr: `node ${node.name} is not running` });
    return runCommand('nsenter', ['-t', String(pid), '-n', '-m', '-u', '--', ...argv]);
  };
}

/** SIGHUP to the node's init, then until its agent.pid (provider/join/service.ts) names another live process. */
async function restartAgentOf(node: LocalNode): Promise<void> {
  // Simulated hosts share this machine's pid namespace, and their state dir is visible from here.
  const agentPid = async () => {
    const pid = await readFile(join(node.stateDir, 'agent.pid'), 'utf8').then(
      (s) => (JSON.parse(s) as { pid: number }).pid,
      () => 0,
    );
    return pid && existsSync(`/proc/${pid}`) ? pid : 0;
  };
  const before = await agentPid();
  const init = simulatedHostPid(node.name);
  if (!before || init === undefined) throw new Error(`node ${node.name} runs no agent to restart`);
  process.kill(init, 'SIGHUP');
  await poll(`${node.name}'s agent restarted`, agentPid, (pid) => pid !== 0 && pid !== before, { deadlineMs: 120_000, intervalMs: 500 });
}

/**
 * Starts `npm start -- --nodes N` on a fresh state dir and waits for its
 * "are up" line. Teardown interrupts it if the test did not, and kills what
 * is left of its state dir's processes.
 */
export async function startUpCluster(
  t: Test,
  o: { nodes: number; containerNodes?: number; nodeName: string; extraArgs?: string[] },
): Promise<UpCluster> {
  const stateDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-nodes-'));
  await chmod(stateDir, 0o711);
  // One bridge per test's node 1: agents of concurrent tests share this host's network stack.
  const bridge = `vkn${randomBytes(4).toString('hex')}`;
  const args = [
    `--bridge=${bridge}`,
    `--state-dir=${stateDir}`,
    `--nodes=${o.nodes}`,
    ...(o.containerNodes ? [`--container-nodes=${o.containerNodes}`] : []),
    `--node-name=${o.nodeName}`,
    '--subresources-port=0',
    `--kubelet-port=${await freePort()}`,
    '--healthz-port=0',
    ...(o.extraArgs ?? []),
  ];
  const child = spawn('npm', ['start', '--', ...args], { cwd: packageRoot(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const output: string[] = [];
  for (const s of [child.stdout, child.stderr]) createInterface({ input: s }).on('line', (l) => output.push(l));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const running = () => pidsWhere((argv) => argv.some((a) => a.includes(stateDir))).map((pid) => argvOf(pid).join(' ').slice(0, 200));
  let interrupted: Promise<string[]> | undefined;
  const interrupt = () => {
    interrupted ??= (async () => {
      process.kill(-child.pid!, 'SIGINT');
      await exited;
      return poll(
        'vkvm up and its nodes to stop',
        async () => running(),
        (left) => left.length === 0,
        {
          deadlineMs: STOP_TIMEOUT_MS,
          intervalMs: 500,
        },
      ).catch(async () => running());
    })();
    return interrupted;
  };
  t.teardown(async () => {
    if (!t.passing()) t.comment(`vkvm up's last lines:\n${output.slice(-60).join('\n')}`);
    if (child.exitCode === null && child.signalCode === null) await interrupt();
    for (const pid of pidsWhere((argv) => argv.some((a) => a.includes(stateDir)))) process.kill(pid, 'SIGKILL');
    await rm(stateDir, { recursive: true, force: true });
  });

  const deadline = Date.now() + UP_TIMEOUT_MS;
  while (!output.some((l) => l.startsWith('vkvm: node'))) {
    if (child.exitCode !== null || Date.now() > deadline)
      throw new Error(`vkvm up --nodes ${o.nodes} did not come up (exit ${child.exitCode}):\n${output.slice(-40).join('\n')}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  const segment = segmentOf(DEFAULT_NODES_CIDR);
  // Container nodes follow the vkvm nodes on the segment.
  const simulated = localNodes({
    count: o.nodes + (o.containerNodes ?? 0),
    node1: o.nodeName,
    segment,
    upStateDir: stateDir,
    upRunDir: '/run/vkvm',
  });
  const kubeconfigPath = join(stateDir, 'kubeconfig');
  const binary = await ensureClusterBinary(testLog);
  return {
    stateDir,
    bridge,
    kubeconfigPath,
    binary,
    clients: makeClients(loadKubeConfig(kubeconfigPath)),
    nodes: [
      { name: o.nodeName, address: segment.hostAddress, exec: nodeExec(undefined) },
      ...simulated.map((n, i) => ({
        name: n.name,
        address: n.address,
        simulated: n,
        ...(i >= o.nodes - 1 ? { container: true } : { restartAgent: () => restartAgentOf(n) }),
        exec: nodeExec(n),
      })),
    ],
    output,
    kubectl: (kargs, kubeconfig = kubeconfigPath) => runCommand(binary, ['kubectl', `--kubeconfig=${kubeconfig}`, ...kargs]),
    interrupt,
  };
}

/** What a vkvm node made for a pod's VM: processes naming its UID (launcher, QEMU), its VM directory, its network namespace. */
export async function vmTracesOn(up: UpCluster, node: UpNode, uid: string) {
  return {
    processes: pidsWhere((argv) => argv.some((a) => a.includes(uid))).map((pid) => argvOf(pid).join(' ').slice(0, 120)),
    vmDir: existsSync(join(node.simulated?.stateDir ?? up.stateDir, 'vms', uid)),
    netns: (await node.exec(['ip', 'netns', 'list'])).stdout.includes(vmNetworkNames(uid).netns),
  };
}

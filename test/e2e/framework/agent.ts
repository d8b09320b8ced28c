// Node agents for e2e tests: `vkvm node` from the built CLI as a real child
// process, and the removal of whatever an agent leaves (launchers, QEMU,
// cgroups, the pod network), so no VM outlives a test file.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import { freePort } from '../../../deploy/cluster/cluster.js';
import { packageRoot } from '../../../provider/package-root.js';
import { DEFAULTS as LAUNCHER_DEFAULTS } from '../../../launcher/args.js';
import { Cgroup } from '../../../launcher/cgroup.js';
import { isLauncherAlive, readStateFile, STATE_FILE_NAME } from '../../../launcher/state.js';
import { PodNetwork } from '../../../provider/network/pod-network.js';
import { importTestGuest } from '../../../provider/images/test-guest-images.js';
import { testLog } from './cluster.js';
import { poll } from './wait.js';

export const CLI = join(packageRoot(), 'dist', 'provider', 'cli', 'main.js');

export interface AgentProcess {
  nodeName: string;
  kubeletPort: number;
  stateDir: string;
  bridge: string;
  /** The flags it was started with beyond the ones every test agent gets. */
  extraArgs: string[];
  child: ChildProcess;
  /** Its log lines so far (pino JSON, stdout and stderr). */
  output: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** The image store the agent's flags name (--image-store-dir, else <state dir>/images, as provider/config.ts says). */
function imageStoreDirOf(stateDir: string, extraArgs: string[]): string {
  const flag = extraArgs.findLast((a) => a.startsWith('--image-store-dir='));
  return flag ? flag.slice('--image-store-dir='.length) : join(stateDir, 'images');
}

/**
 * Starts `vkvm node` from the built CLI; waits for its "node agent running"
 * log line. The test guest's images (localhost/vkvm/test-guest:v1 and
 * test-guest-kernel:v1) are imported into its store first, as `vkvm up`
 * does, unless `testGuestImages` is false (a store too small for them).
 */
export async function startAgent(
  t: Test,
  cluster: { kubeconfigPath: string },
  opts: { nodeName: string; kubeletPort?: number; stateDir?: string; bridge?: string; extraArgs?: string[]; testGuestImages?: boolean },
): Promise<AgentProcess> {
  const kubeletPort = opts.kubeletPort ?? (await freePort());
  const stateDir = opts.stateDir ?? (await mkdtemp(join(tmpdir(), `vkvm-e2e-${opts.nodeName}-`)));
  // One bridge per agent: agents of concurrent tests share the host's network stack.
  const bridge = opts.bridge ?? `vkt${randomBytes(4).toString('hex')}`;
  // mkdtemp makes it 0700; QEMU (unprivileged) must reach the VM disks below it.
  await chmod(stateDir, 0o711);
  if (opts.testGuestImages !== false)
    await importTestGuest(imageStoreDirOf(stateDir, opts.extraArgs ?? []), { log: (msg) => testLog.debug(msg) });
  // The agent dies with this test process, however it ends: a file tap kills at its timeout runs no teardown, and an
  // orphaned agent would go on working (and using a core) through the rest of the suite. setpriv execs in place.
  const child = spawn(
    'setpriv',
    [
      '--pdeathsig',
      'KILL',
      '--',
      process.execPath,
      CLI,
      'node',
      `--kubeconfig=${cluster.kubeconfigPath}`,
      `--node-name=${opts.nodeName}`,
      `--kubelet-port=${kubeletPort}`,
      `--state-dir=${stateDir}`,
      `--run-dir=${join(stateDir, 'run')}`,
      `--bridge=${bridge}`,
      '--healthz-port=0',
      '--approve-serving-csr',
      ...(opts.extraArgs ?? []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const output: string[] = [];
  // Kept beside the agent's state for reading after a failure.
  const logFile = createWriteStream(join(stateDir, 'agent.log'), { flags: 'a' });
  // Best effort: a test may fill the state dir's filesystem; the lines stay in `output`.
  logFile.on('error', () => {});
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const ready = new Promise<void>((resolve, reject) => {
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        output.push(line);
        logFile.write(line + '\n');
        if (line.includes('"node agent running"')) resolve();
      });
    }
    void exited.then(({ code, signal }) => reject(new Error(`agent exited (${code ?? signal}) before running:\n${output.join('\n')}`)));
  });
  const kill = async (signal: NodeJS.Signals = 'SIGTERM') => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    await exited;
  };
  t.teardown(async () => {
    await kill('SIGKILL');
    await killLaunchersOf(stateDir);
    await removeNetworkOf(stateDir, bridge);
    // Teardowns run last-registered first, so agents restarted on this dir are gone by now. A failed test keeps its agent.log.
    if (!opts.stateDir && t.passing()) await rm(stateDir, { recursive: true, force: true });
    else if (!opts.stateDir) t.comment(`agent state kept for inspection: ${stateDir}`);
  });
  await ready;
  return { nodeName: opts.nodeName, kubeletPort, stateDir, bridge, extraArgs: opts.extraArgs ?? [], child, output, exited, kill };
}

/**
 * Starts an agent again on the same node name, port, state dir and bridge
 * (after `agent.kill`), with the same flags unless `extraArgs` replaces them.
 * Owned by `t`: pass the file's test, not a subtest whose end would stop it.
 */
export function restartAgent(
  t: Test,
  cluster: { kubeconfigPath: string },
  agent: AgentProcess,
  extraArgs = agent.extraArgs,
): Promise<AgentProcess> {
  return startAgent(t, cluster, {
    nodeName: agent.nodeName,
    kubeletPort: agent.kubeletPort,
    stateDir: agent.stateDir,
    bridge: agent.bridge,
    extraArgs,
  });
}

/** The agent's log lines (parsed) with this message, e.g. "launcher gone". */
export function agentLogLines(agent: AgentProcess, msg: string): Array<Record<string, unknown>> {
  return agent.output.filter((l) => l.includes(`"msg":${JSON.stringify(msg)}`)).map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Removes the pod network an agent built (VM namespaces, DHCP, rules, bridge); its VMs must be gone. */
export async function removeNetworkOf(stateDir: string, bridge: string): Promise<void> {
  const network = new PodNetwork({ bridge, dir: join(stateDir, 'network'), podCidr: async () => undefined, log: testLog });
  await network.retainOnly(() => false);
  await network.node.remove();
}

/**
 * Kills the launchers an agent left in its state dir (SIGKILL takes QEMU
 * with them) and removes their cgroups, so no VM outlives a test file.
 */
export async function killLaunchersOf(stateDir: string): Promise<void> {
  const vmsDir = join(stateDir, 'vms');
  for (const uid of await readdir(vmsDir).catch(() => [] as string[])) {
    const state = await readStateFile(join(vmsDir, uid, STATE_FILE_NAME)).catch(() => undefined);
    if (state && (await isLauncherAlive(state))) process.kill(state.pid, 'SIGKILL');
    // A launcher that started after the agent was killed is not in the state file yet; its cgroup knows it.
    const rel = `${LAUNCHER_DEFAULTS.cgroupParent}/${uid}/cgroup.procs`;
    const procs = (
      await Promise.all([`/sys/fs/cgroup/pids/${rel}`, `/sys/fs/cgroup/${rel}`].map((f) => readFile(f, 'utf8').catch(() => '')))
    ).join('\n');
    for (const pid of procs.split('\n').filter(Boolean)) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // Exited meanwhile.
      }
    }
    await poll(
      `cgroup of ${uid} removed`,
      () => Cgroup.removeLeftover({ uid, parent: LAUNCHER_DEFAULTS.cgroupParent }).then(() => true),
      (ok) => ok,
      { deadlineMs: 20_000, intervalMs: 100 },
    );
  }
}

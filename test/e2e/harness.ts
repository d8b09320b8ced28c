// Shared set-up for e2e tests: a real control plane from deploy/cluster, node
// agents as real child processes, and waits with deadlines that report the
// last state seen.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';
import { pino } from 'pino';
import { KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { freeClusterPorts, freePort, startCluster, type RunningCluster } from '../../deploy/cluster/cluster.js';
import { loadKubeConfig, makeClients, type KubeClients } from '../../provider/kube/client.js';
import { packageRoot } from '../../provider/package-root.js';
import { DEFAULTS as LAUNCHER_DEFAULTS } from '../../launcher/args.js';
import { Cgroup } from '../../launcher/cgroup.js';
import { isLauncherAlive, readStateFile, STATE_FILE_NAME } from '../../launcher/state.js';
import { PodNetwork } from '../../provider/network/pod-network.js';

export const testLog = pino({ level: process.env.VKVM_TEST_LOG ?? 'warn' });

export interface TestCluster extends RunningCluster {
  clients: KubeClients;
  stateDir: string;
}

/** A fresh control plane for one test file, stopped and removed in teardown. */
export async function startTestCluster(
  t: Test,
  opts: { nodeMonitorGracePeriodS?: number; bindAddress?: string } = {},
): Promise<TestCluster> {
  const stateDir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-cluster-'));
  const cluster = await startCluster({
    stateDir,
    ports: await freeClusterPorts(),
    // Clusters of concurrent test runs on one host must not hand out the same pod ranges.
    clusterCidr: `10.${100 + randomInt(150)}.0.0/16`,
    unsafeNoFsync: true,
    log: testLog,
    ...(opts.nodeMonitorGracePeriodS ? { nodeMonitorGracePeriodS: opts.nodeMonitorGracePeriodS } : {}),
    ...(opts.bindAddress ? { bindAddress: opts.bindAddress } : {}),
  });
  t.teardown(async () => {
    await cluster.stop();
    await rm(stateDir, { recursive: true, force: true });
  });
  return { ...cluster, stateDir, clients: makeClients(loadKubeConfig(cluster.kubeconfigPath)) };
}

/**
 * Clients for the vkvm controllers under their own identity, bound as
 * deploy/rbac.yaml tells operators to: a ServiceAccount in kube-system with
 * the vkvm:controllers role and the leader-election Role, and a token for it.
 * So the shipped RBAC is what the approver and the VMI controllers run with.
 */
export async function controllersIdentity(cluster: TestCluster): Promise<KubeClients> {
  const name = 'vkvm-controllers';
  const namespace = 'kube-system';
  const admin = cluster.clients;
  const rbac = admin.kc.makeApiClient(RbacAuthorizationV1Api);
  const subjects = [{ kind: 'ServiceAccount', name, namespace }];
  await admin.core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await rbac.createClusterRoleBinding({
    body: {
      metadata: { name: 'vkvm:controllers' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'vkvm:controllers' },
      subjects,
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: 'vkvm:controllers-leader-election' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'vkvm:controllers-leader-election' },
      subjects,
    },
  });
  const issued = await admin.core.createNamespacedServiceAccountToken({
    name,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const current = admin.kc.getCurrentCluster()!;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [current],
    users: [{ name, token: issued.status!.token }],
    contexts: [{ name, cluster: current.name, user: name }],
    currentContext: name,
  });
  return makeClients(kc);
}

export interface AgentProcess {
  nodeName: string;
  kubeletPort: number;
  stateDir: string;
  bridge: string;
  child: ChildProcess;
  output: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export const CLI = join(packageRoot(), 'dist', 'provider', 'cli', 'main.js');

/** Starts `vkvm node` from the built CLI; waits for its "node agent running" log line. */
export async function startAgent(
  t: Test,
  cluster: { kubeconfigPath: string },
  opts: { nodeName: string; kubeletPort?: number; stateDir?: string; bridge?: string; extraArgs?: string[] },
): Promise<AgentProcess> {
  const kubeletPort = opts.kubeletPort ?? (await freePort());
  const stateDir = opts.stateDir ?? (await mkdtemp(join(tmpdir(), `vkvm-e2e-${opts.nodeName}-`)));
  // One bridge per agent: agents of concurrent tests share the host's network stack.
  const bridge = opts.bridge ?? `vkt${randomBytes(4).toString('hex')}`;
  // mkdtemp makes it 0700; QEMU (unprivileged) must reach the VM disks below it.
  await chmod(stateDir, 0o711);
  const child = spawn(
    process.execPath,
    [
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
  return { nodeName: opts.nodeName, kubeletPort, stateDir, bridge, child, output, exited, kill };
}

/** Removes the pod network an agent built (VM namespaces, DHCP, rules, bridge); its VMs must be gone. */
export async function removeNetworkOf(stateDir: string, bridge: string): Promise<void> {
  const network = new PodNetwork({ bridge, dir: join(stateDir, 'network'), podCidr: async () => undefined, log: testLog });
  await network.retainOnly(() => false);
  await network.node.remove();
}

/** Host PIDs of running (not zombie) QEMU processes whose argv matches. */
export function qemuPids(match: (argv: string[]) => boolean): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0');
      const state = /^\S+ \(.*\) (\S)/.exec(readFileSync(`/proc/${name}/stat`, 'utf8'))?.[1];
      if (argv[0]?.includes('qemu-system') && state !== 'Z' && match(argv)) pids.push(Number(name));
    } catch {
      // The process exited while we looked.
    }
  }
  return pids;
}

/** QEMU processes of a plain pod's VM: the pod UID is its domain uuid, on QEMU's command line (a VMI's is its firmware UUID). */
export const qemuPidsOf = (uid: string): number[] => qemuPids((argv) => argv.includes(uid));

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
    await waitFor(
      `cgroup of ${uid} removed`,
      () => Cgroup.removeLeftover({ uid, parent: LAUNCHER_DEFAULTS.cgroupParent }).then(() => true),
      (ok) => ok,
      { timeoutMs: 20_000, intervalMs: 100 },
    );
  }
}

/**
 * Polls `probe` until `done` holds for its result or the deadline passes; on
 * timeout the error carries the last value seen.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T>,
  done: (v: T) => boolean,
  opts: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  let last: T | undefined;
  let lastErr: unknown;
  while (Date.now() < deadline) {
    try {
      last = await probe();
      if (done(last)) return last;
    } catch (err) {
      lastErr = err;
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 500));
  }
  throw new Error(
    `timed out waiting for ${what}; last seen: ${JSON.stringify(last, null, 1)?.slice(0, 4000)}${lastErr ? `; last error: ${String(lastErr)}` : ''}`,
  );
}

export function condition(obj: { status?: { conditions?: Array<{ type: string; status: string }> } }, type: string): string | undefined {
  return obj.status?.conditions?.find((c) => c.type === type)?.status;
}

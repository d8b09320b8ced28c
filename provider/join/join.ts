// `vkvm join`: turns this host into a node of an existing cluster from a
// bootstrap token and the CA hash, as `kubeadm join` does for a kubelet.
//   1. preflight: a failed hard check stops here, before anything is written
//   2. discovery: the cluster CA, verified by token signature and CA pin
//   3. TLS bootstrap: a node client certificate through the CSR API under
//      the token (kube-controller-manager approves and signs it)
//   4. the node kubeconfig, the certificate and join.json, written last
//      (unless another host keeps a Node of that name Ready)
//   5. the agent as a service (systemd) or a detached process; it obtains
//      its serving certificate and keeps both certificates renewed
//   6. wait until the Node is Ready
// Steps 1–3 only read the host, so a wrong hash, a bad token or a missing
// package leave nothing behind; a failure while writing removes what was written.
import { mkdir, readFile, rm, rmdir, stat } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { KubeConfig, type V1Node } from '@kubernetes/client-node';
import { KUBELET_CLIENT_SIGNER, clientSubject, nodeKubeconfig } from '../certs/client.js';
import { writeAtomic } from '../atomic-file.js';
import { ensurePrivateDir, requestCertificate } from '../certs/csr-api.js';
import type { AgentConfig } from '../config.js';
import { loadKubeConfig, makeClients } from '../kube/client.js';
import { apiStatusCode } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { formatPreflight, hardFailures, type PreflightCheck } from '../preflight/checks.js';
import { hostPreflight } from '../preflight/host.js';
import type { BootstrapToken } from './bootstrap-token.js';
import { discoverClusterCa } from './discovery.js';
import { JoinError } from './errors.js';
import {
  AGENT_LOG,
  cliPath,
  detachedAgentPid,
  installSystemdService,
  renderAgentEnv,
  startDetachedAgent,
  systemdIsInit,
  type ServiceMode,
} from './service.js';

export const JOIN_RECORD = 'join.json';
export const CLIENT_PEM = join('pki', 'kubelet-client-current.pem');

/** What reset needs to undo a join, written last by join. */
export interface JoinRecord {
  server: string;
  nodeName: string;
  runDir: string;
  imageCacheDir: string;
  /** The pod network's bridge, which reset removes if the agent created it. */
  bridge: string;
  /** Its VMs' cgroup parent (absent in records older than --cgroup-parent: vkvm). */
  cgroupParent?: string;
  service: ServiceMode;
  agentArgs: string[];
}

export interface JoinOptions {
  server: string;
  token: BootstrapToken;
  caHashes: string[];
  /** The agent's configuration (kubeconfig = <stateDir>/kubeconfig). */
  agent: AgentConfig;
  /** Agent flags to run it with, beyond --kubeconfig, --state-dir and --rotate-client-cert. */
  agentArgs: string[];
  noSystemd: boolean;
  /** Environment of the started agent (detached mode). */
  env: NodeJS.ProcessEnv;
  clientCertTimeoutMs: number;
  readyTimeoutMs: number;
  /** How long to wait for the serving certificate after Ready; its absence only warns. */
  servingCertTimeoutMs: number;
  /** Where preflight reports go (stderr). */
  report: (text: string) => void;
}

export interface JoinResult {
  nodeName: string;
  service: ServiceMode;
  alreadyJoined: boolean;
  /** The agent's kubelet API listens, so it holds its serving certificate (kubectl logs/exec work). */
  kubeletApiServing: boolean;
  preflight: PreflightCheck[];
}

export async function readJoinRecord(stateDir: string): Promise<JoinRecord | undefined> {
  try {
    return JSON.parse(await readFile(join(stateDir, JOIN_RECORD), 'utf8')) as JoinRecord;
  } catch {
    return undefined;
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function preflight(o: JoinOptions): Promise<PreflightCheck[]> {
  const checks = await hostPreflight(o.agent);
  o.report(`vkvm join: preflight\n${formatPreflight(checks)}\n`);
  const failed = hardFailures(checks);
  if (failed.length) {
    throw new JoinError(
      `preflight failed; nothing was changed. Fix and re-run:\n${failed.map((c) => `  - ${c.condition}: ${c.message}`).join('\n')}`,
    );
  }
  return checks;
}

/** The TLS bootstrap: a client certificate for system:node:<name>, requested with the token. */
async function bootstrapClientCert(o: JoinOptions, caPem: string): Promise<{ certPem: string; keyPem: string }> {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'bootstrap', server: o.server, caData: Buffer.from(caPem).toString('base64') }],
    users: [{ name: 'bootstrap', token: `${o.token.id}.${o.token.secret}` }],
    contexts: [{ name: 'bootstrap', cluster: 'bootstrap', user: 'bootstrap' }],
    currentContext: 'bootstrap',
  });
  try {
    return await requestCertificate(makeClients(kc), {
      namePrefix: `node-csr-${o.agent.nodeName}`,
      signerName: KUBELET_CLIENT_SIGNER,
      usages: ['digital signature', 'client auth'],
      subject: clientSubject(o.agent.nodeName),
      issueTimeoutMs: o.clientCertTimeoutMs,
    });
  } catch (err) {
    const code = apiStatusCode(err);
    if (code === 401)
      throw new JoinError(
        `the API server rejected --token (HTTP 401): the bootstrap token is unknown or expired; create a new one with "vkvm token create"`,
        { cause: err },
      );
    if (code === 403) {
      throw new JoinError(
        `--token may not request node certificates (HTTP 403): the bootstrap RBAC is missing; run "vkvm token create" (it applies deploy/bootstrap-rbac.yaml)`,
        { cause: err },
      );
    }
    if (err instanceof Error && /not issued in time/.test(err.message)) {
      throw new JoinError(
        `${err.message}: kube-controller-manager must run the csrapproving and csrsigning controllers, and deploy/bootstrap-rbac.yaml must be applied`,
        { cause: err },
      );
    }
    throw err;
  }
}

/**
 * Refuses to take over a Node that another host keeps Ready (as kubeadm
 * does): the new credentials are the same identity, so nothing else would stop it.
 */
async function checkNodeNameFree(o: JoinOptions, caPem: string, pair: { certPem: string; keyPem: string }): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'node', server: o.server, caData: Buffer.from(caPem).toString('base64') }],
    users: [{ name: 'node', certData: Buffer.from(pair.certPem).toString('base64'), keyData: Buffer.from(pair.keyPem).toString('base64') }],
    contexts: [{ name: 'node', cluster: 'node', user: 'node' }],
    currentContext: 'node',
  });
  let node: V1Node;
  try {
    node = await makeClients(kc).core.readNode({ name: o.agent.nodeName });
  } catch (err) {
    if (apiStatusCode(err) === 404) return;
    throw err;
  }
  if (node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) {
    throw new JoinError(
      `a Node named ${o.agent.nodeName} already exists and is Ready: another host uses this name; pass another --node-name, or "kubectl delete node ${o.agent.nodeName}" if it is gone. Nothing was written.`,
    );
  }
}

/** Writes the node's credentials and join record; on failure removes whatever it wrote. */
async function writeJoinState(o: JoinOptions, caPem: string, pair: { certPem: string; keyPem: string }, record: JoinRecord): Promise<void> {
  const stateDir = o.agent.stateDir;
  const createdDir = !(await exists(stateDir));
  const pemPath = join(stateDir, CLIENT_PEM);
  const written: string[] = [];
  try {
    // o+x: QEMU, unprivileged, reaches VM disks below the state dir.
    await mkdir(stateDir, { recursive: true, mode: 0o711 });
    await ensurePrivateDir(join(stateDir, 'pki'));
    written.push(pemPath);
    await writeAtomic(pemPath, `${pair.certPem.trim()}\n${pair.keyPem.trim()}\n`, 0o600);
    written.push(o.agent.kubeconfigPath);
    await writeAtomic(o.agent.kubeconfigPath, nodeKubeconfig({ server: o.server, caPem, nodeName: o.agent.nodeName, pemPath }), 0o600);
    written.push(join(stateDir, JOIN_RECORD));
    await writeAtomic(join(stateDir, JOIN_RECORD), JSON.stringify(record, null, 2) + '\n', 0o600);
  } catch (err) {
    for (const f of written) await rm(f, { force: true });
    if (createdDir) await rm(stateDir, { recursive: true, force: true });
    else await rmdir(join(stateDir, 'pki')).catch(() => undefined);
    throw err;
  }
}

async function waitNodeReady(o: JoinOptions, agentAlive: () => Promise<boolean>): Promise<V1Node> {
  const clients = makeClients(loadKubeConfig(o.agent.kubeconfigPath));
  const deadline = Date.now() + o.readyTimeoutMs;
  let last = 'not registered yet';
  while (Date.now() < deadline) {
    if (!(await agentAlive()))
      throw new JoinError(`the node agent exited; see ${join(o.agent.stateDir, AGENT_LOG)} ("vkvm reset" undoes the join)`);
    try {
      const node = await clients.core.readNode({ name: o.agent.nodeName });
      const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
      if (ready?.status === 'True') return node;
      last = `Ready=${ready?.status ?? 'unknown'} ${ready?.message ?? ''}`;
    } catch (err) {
      if (apiStatusCode(err) !== 404) last = String(err);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new JoinError(
    `Node ${o.agent.nodeName} did not become Ready within ${o.readyTimeoutMs / 1000} s (last: ${last}); see ${join(o.agent.stateDir, AGENT_LOG)}`,
  );
}

/** Something accepts TCP connections at host:port. */
export function acceptsConnections(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

/** The agent's kubelet API accepts connections: it listens only once its serving certificate was issued. */
async function waitListening(host: string, port: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!(await acceptsConnections(host, port))) {
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 500));
  }
  return true;
}

export async function joinCluster(o: JoinOptions, log: Logger): Promise<JoinResult> {
  const checks = await preflight(o);
  const previous = await readJoinRecord(o.agent.stateDir);
  if (previous && (previous.server !== o.server || previous.nodeName !== o.agent.nodeName)) {
    throw new JoinError(
      `${o.agent.stateDir} already holds the join of node ${previous.nodeName} to ${previous.server}; run "vkvm reset --state-dir ${o.agent.stateDir}" first`,
    );
  }
  const service: ServiceMode = !o.noSystemd && (await systemdIsInit()) ? 'systemd' : 'process';
  const agentArgs = ['--kubeconfig', o.agent.kubeconfigPath, '--state-dir', o.agent.stateDir, '--rotate-client-cert', ...o.agentArgs];
  const record: JoinRecord = {
    server: o.server,
    nodeName: o.agent.nodeName,
    runDir: o.agent.runDir,
    imageCacheDir: o.agent.imageCacheDir,
    bridge: o.agent.bridge,
    cgroupParent: o.agent.cgroupParent,
    service,
    agentArgs,
  };
  // Checked now, before anything is written: systemd cannot pass an argument holding whitespace.
  if (service === 'systemd') renderAgentEnv(process.execPath, cliPath(), agentArgs);
  // Re-running a join that completed keeps its credentials and only (re)starts the agent.
  const alreadyJoined = previous !== undefined && (await exists(join(o.agent.stateDir, CLIENT_PEM)));
  if (!alreadyJoined) {
    const caPem = await discoverClusterCa(o.server, o.token, o.caHashes);
    log.info({ server: o.server }, 'cluster CA verified against the pinned hash');
    const pair = await bootstrapClientCert(o, caPem);
    log.info({ node: o.agent.nodeName }, 'node client certificate issued');
    await checkNodeNameFree(o, caPem, pair);
    await writeJoinState(o, caPem, pair, record);
  } else {
    await writeAtomic(join(o.agent.stateDir, JOIN_RECORD), JSON.stringify(record, null, 2) + '\n', 0o600);
  }
  let agentAlive: () => Promise<boolean>;
  if (service === 'systemd') {
    await installSystemdService(agentArgs, log);
    agentAlive = async () => true;
  } else {
    await startDetachedAgent(o.agent.stateDir, agentArgs, o.env, log);
    agentAlive = async () => (await detachedAgentPid(o.agent.stateDir)) !== undefined;
  }
  await waitNodeReady(o, agentAlive);
  const anyAddress = ['0.0.0.0', '::', ''].includes(o.agent.kubeletBindAddress);
  const kubeletApiServing = await waitListening(
    anyAddress ? '127.0.0.1' : o.agent.kubeletBindAddress,
    o.agent.kubeletPort,
    o.servingCertTimeoutMs,
  );
  return { nodeName: o.agent.nodeName, service, alreadyJoined, kubeletApiServing, preflight: checks };
}

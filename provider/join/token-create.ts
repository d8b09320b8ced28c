// The admin side of joining (`vkvm token create`), as `kubeadm token create
// --print-join-command`: a bootstrap token Secret, the bootstrap RBAC, the
// kube-public/cluster-info ConfigMap discovery reads, and the join command.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { applyManifests, readManifests } from '../kube/apply.js';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { packageRoot } from '../package-root.js';
import { bootstrapTokenSecret, formatBootstrapToken, generateBootstrapToken, type BootstrapToken } from './bootstrap-token.js';
import { caCertHash, caFromClusterInfoKubeconfig, CLUSTER_INFO, splitPem } from './discovery.js';
import { ConfigError } from '../config.js';

export interface TokenCreateOptions {
  /** Token lifetime; 0 = never expires. */
  ttlS: number;
  description: string;
  /** API server URL to print (and to publish in a new cluster-info); default: the kubeconfig's. */
  server?: string;
  /** How long to wait for the bootstrapsigner to sign cluster-info for the new token. */
  signTimeoutMs?: number;
  now?: () => Date;
}

export interface CreatedToken {
  token: BootstrapToken;
  server: string;
  caHashes: string[];
  joinCommand: string;
}

/** Parses a kubeadm-style duration: 0, 90s, 30m, 24h, 1h30m. */
export function parseTtl(raw: string, field = '--ttl'): number {
  if (raw === '0') return 0;
  const m = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(raw);
  if (!m || raw === '' || (!m[1] && !m[2] && !m[3]))
    throw new ConfigError(field, `want a duration like 24h, 30m or 0 (never expires), got ${JSON.stringify(raw)}`);
  return Number(m[1] ?? 0) * 3600 + Number(m[2] ?? 0) * 60 + Number(m[3] ?? 0);
}

export const joinCommand = (server: string, token: BootstrapToken, caHashes: string[]): string =>
  [
    'vkvm join',
    `--server ${server}`,
    `--token ${formatBootstrapToken(token)}`,
    ...caHashes.map((h) => `--discovery-token-ca-cert-hash ${h}`),
  ].join(' ');

async function kubeconfigCa(clients: KubeClients): Promise<string> {
  const cluster = clients.kc.getCurrentCluster();
  if (cluster?.caData) return Buffer.from(cluster.caData, 'base64').toString('utf8');
  if (cluster?.caFile) return readFile(cluster.caFile, 'utf8');
  throw new Error('the kubeconfig has no certificate-authority: the CA hash a joining node pins cannot be computed');
}

/** Creates kube-public/cluster-info unless it exists (its CA is then what joining nodes verify). */
async function ensureClusterInfo(clients: KubeClients, server: string, caPem: string, log: Logger): Promise<string> {
  try {
    const existing = await clients.core.readNamespacedConfigMap(CLUSTER_INFO);
    if (existing.data?.kubeconfig) return caFromClusterInfoKubeconfig(existing.data.kubeconfig);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  const kubeconfig = stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: '', cluster: { 'certificate-authority-data': Buffer.from(caPem).toString('base64'), server } }],
    contexts: [],
    users: [],
    'current-context': '',
    preferences: {},
  });
  await applyManifests(clients, [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { ...CLUSTER_INFO }, data: { kubeconfig } } as never]);
  log.info({ server }, 'published kube-public/cluster-info');
  return caPem;
}

export async function createJoinToken(clients: KubeClients, opts: TokenCreateOptions, log: Logger): Promise<CreatedToken> {
  const server = opts.server ?? clients.kc.getCurrentCluster()?.server;
  if (!server) throw new Error('the kubeconfig names no server; pass --server');
  await applyManifests(clients, await readManifests(join(packageRoot(), 'deploy', 'bootstrap-rbac.yaml')));
  const caPem = await ensureClusterInfo(clients, server, await kubeconfigCa(clients), log);
  const caHashes = splitPem(caPem).map(caCertHash);
  const token = generateBootstrapToken();
  const now = (opts.now ?? (() => new Date()))();
  const secret = bootstrapTokenSecret(token, {
    description: opts.description,
    ...(opts.ttlS > 0 ? { expiration: new Date(now.getTime() + opts.ttlS * 1000) } : {}),
  });
  await clients.core.createNamespacedSecret({ namespace: 'kube-system', body: secret });
  await waitSigned(clients, token, opts.signTimeoutMs ?? 30_000);
  return { token, server, caHashes, joinCommand: joinCommand(server, token, caHashes) };
}

/** The printed command only works once the bootstrapsigner has signed cluster-info for this token. */
async function waitSigned(clients: KubeClients, token: BootstrapToken, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delayMs = 100; Date.now() < deadline; delayMs = Math.min(delayMs * 2, 2000)) {
    const cm = await clients.core.readNamespacedConfigMap(CLUSTER_INFO);
    if (cm.data?.[`jws-kubeconfig-${token.id}`]) return;
    await new Promise((r) => setTimeout(r, delayMs));
  }
  throw new Error(
    `kube-public/cluster-info was not signed for token ${token.id} within ${timeoutMs / 1000} s: is kube-controller-manager running with --controllers=*,bootstrapsigner,tokencleaner?`,
  );
}

// API handles built from one KubeConfig. Patch helpers set the content type
// explicitly: the generated client defaults to JSON patch otherwise.
import { readFile } from 'node:fs/promises';
import https from 'node:https';
import {
  createConfiguration,
  ServerConfiguration,
  type RequestContext,
  type SecurityAuthentication,
  CertificatesV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
  KubernetesObjectApi,
  PatchStrategy,
  AuthenticationV1Api,
  AuthorizationV1Api,
  StorageV1Api,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { DEFAULT_WATCH_PROGRESS_DEADLINE_MS } from './progress-watch.js';

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  coordination: CoordinationV1Api;
  certificates: CertificatesV1Api;
  authn: AuthenticationV1Api;
  authz: AuthorizationV1Api;
  objects: KubernetesObjectApi;
  custom: CustomObjectsApi;
  /** CSINode, CSIDriver, VolumeAttachment (the CSI node side, provider/csi-node/). */
  storage: StorageV1Api;
  /** A watch silent this long is taken for a half-open connection and started again (progress-watch.ts). */
  watchProgressDeadlineMs: number;
  /**
   * Closes every pooled connection to the API server, busy ones included: requests on them fail at once and the
   * next ones connect anew. What the kubelet does when a heartbeat fails, since a request on a half-open
   * keep-alive connection would otherwise wait forever (lease.ts).
   */
  closeConnections(): void;
}

export function loadKubeConfig(path: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

/** How long a replaced pool keeps its connections for the requests still on them. */
const RETIRED_POOL_MS = 60_000;

/**
 * The kubeconfig's authentication, with one keep-alive connection pool.
 * client-node makes a new https.Agent for every request, so every API call
 * was a new TLS handshake (client certificate and all), in this process and
 * in kube-apiserver: the largest part of the agent's own CPU per VM start.
 * Requests with the same TLS material share one agent; new material (a
 * rotated client certificate) gets a new one. Plain HTTP and proxies keep
 * the agent client-node made.
 */
export function pooledAuthentication(kc: KubeConfig): SecurityAuthentication & Pick<KubeClients, 'closeConnections'> {
  let pool: { key: string; agent: https.Agent } | undefined;
  return {
    getName: () => 'kubeconfig',
    closeConnections: () => {
      pool?.agent.destroy();
      pool = undefined;
    },
    applySecurityAuthentication: async (context: RequestContext) => {
      await kc.applySecurityAuthentication(context);
      const made = context.getAgent();
      if (!made || made.constructor !== https.Agent) return;
      const o = (made as https.Agent).options;
      const material = [o.ca, o.cert, o.key, o.pfx, o.passphrase, o.rejectUnauthorized, o.servername];
      const key = JSON.stringify(material.map((v) => (Buffer.isBuffer(v) ? v.toString('base64') : v)));
      if (pool?.key !== key) {
        const retired = pool?.agent;
        if (retired) setTimeout(() => retired.destroy(), RETIRED_POOL_MS).unref();
        pool = { key, agent: new https.Agent({ ...o, keepAlive: true }) };
      }
      context.setAgent(pool.agent);
    },
  };
}

/** KubernetesObjectApi on a given configuration, its default namespace the kubeconfig context's (as its makeApiClient sets it). */
class ObjectApi extends KubernetesObjectApi {
  constructor(config: ConstructorParameters<typeof KubernetesObjectApi>[0], kc: KubeConfig) {
    super(config);
    this.setDefaultNamespace(kc);
  }
}

export function makeClients(kc: KubeConfig, opts: { watchProgressDeadlineMs?: number } = {}): KubeClients {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const auth = pooledAuthentication(kc);
  const config = createConfiguration({ baseServer: new ServerConfiguration(cluster.server, {}), authMethods: { default: auth } });
  return {
    kc,
    core: new CoreV1Api(config),
    coordination: new CoordinationV1Api(config),
    certificates: new CertificatesV1Api(config),
    authn: new AuthenticationV1Api(config),
    authz: new AuthorizationV1Api(config),
    objects: new ObjectApi(config, kc),
    custom: new CustomObjectsApi(config),
    storage: new StorageV1Api(config),
    watchProgressDeadlineMs: opts.watchProgressDeadlineMs ?? DEFAULT_WATCH_PROGRESS_DEADLINE_MS,
    closeConnections: auth.closeConnections,
  };
}

export const strategicMerge = setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch);
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
export const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

/** The cluster CA as a kubeconfig's current cluster names it (base64 PEM). */
export async function clusterCaData(kc: KubeConfig): Promise<string> {
  const cluster = kc.getCurrentCluster();
  if (cluster?.caData) return cluster.caData;
  if (cluster?.caFile) return (await readFile(cluster.caFile)).toString('base64');
  throw new Error('the kubeconfig names no cluster CA');
}

/** The same CA as PEM text: what certificates of the cluster (the API server's, nodes', clients') chain to. */
export async function clusterCaPem(kc: KubeConfig): Promise<string> {
  return Buffer.from(await clusterCaData(kc), 'base64').toString('utf8');
}

// `vkvm up`'s resource metrics API: metrics-server (sigs.k8s.io/metrics-server,
// built into vkvm-cluster, deploy/cluster/metricsserver.go) on the host, at
// node 1's InternalIP, scraping every node's /metrics/resource. It is what
// `kubectl top` and the HorizontalPodAutoscaler controller read. Its identity
// is a client certificate for system:metrics-server that vkvm up, as admin,
// approves (ensureOwnIdentity, as for its other components); its serving certificate is self-signed and published as the
// APIService's caBundle. It dies with vkvm up however vkvm up dies; stop() ends
// it and removes its directory (keys included).
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { KubernetesObject } from '@kubernetes/client-node';
import { freePort } from '../../deploy/cluster/cluster.js';
import { writeAtomic } from '../atomic-file.js';
import { ensureOwnIdentity } from '../certs/client-credentials.js';
import { ensurePrivateDir } from '../certs/csr-api.js';
import { applyManifests } from '../kube/apply.js';
import { clusterCaPem, type KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { selfSignedCert } from '../subresources/serving-cert.js';
import {
  METRICS_SERVER_APISERVICE,
  METRICS_SERVER_DNS_NAME,
  METRICS_SERVER_USER,
  metricsServerArgs,
  metricsServerObjects,
  type MetricsServerFiles,
} from './metrics-server-config.js';
import { awaitServiceReady, spawnHostService } from './host-service.js';

const READY_TIMEOUT_MS = 90_000;

export interface MetricsServerStart {
  /** vkvm-cluster, whose `metrics-server` subcommand this runs. */
  clusterBinary: string;
  /** Node 1's InternalIP: the kube-apiserver reaches it there (Endpoints refuse loopback). */
  address: string;
  /** Admin clients: they approve its CSR and register it. */
  clients: KubeClients;
  /** Its keys, kubeconfig and log: <state-dir>/metrics-server, removed on stop. */
  dir: string;
  log: Logger;
}

export interface RunningMetricsServer {
  stop(): Promise<void>;
}

async function writeFiles(o: MetricsServerStart): Promise<{ files: MetricsServerFiles; servingCaPem: string }> {
  const p = (name: string) => join(o.dir, name);
  const [kubeconfig, serving, caPem] = await Promise.all([
    ensureOwnIdentity(o.clients, { name: 'metrics-server', slug: 'metrics-server', user: METRICS_SERVER_USER, dir: o.dir }),
    selfSignedCert(METRICS_SERVER_DNS_NAME),
    clusterCaPem(o.clients.kc),
  ]);
  const files: MetricsServerFiles = {
    kubeconfig,
    servingCert: p('serving.crt'),
    servingKey: p('serving.key'),
    kubeletCa: p('cluster-ca.crt'),
  };
  await Promise.all([
    writeAtomic(files.servingCert, serving.certPem, 0o600),
    writeAtomic(files.servingKey, serving.keyPem, 0o600),
    writeAtomic(files.kubeletCa, caPem, 0o600),
  ]);
  return { files, servingCaPem: serving.certPem };
}

/** The aggregator's verdict: Available once it reached the server through the Service and got discovery back. */
async function apiServiceAvailable(clients: KubeClients): Promise<{ available: boolean; message?: string }> {
  const svc = (await clients.objects.read({
    apiVersion: 'apiregistration.k8s.io/v1',
    kind: 'APIService',
    metadata: { name: METRICS_SERVER_APISERVICE },
  })) as KubernetesObject & { status?: { conditions?: Array<{ type: string; status: string; message?: string }> } };
  const c = svc.status?.conditions?.find((c) => c.type === 'Available');
  return { available: c?.status === 'True', ...(c?.message ? { message: c.message } : {}) };
}

export async function startMetricsServer(o: MetricsServerStart): Promise<RunningMetricsServer> {
  await ensurePrivateDir(o.dir);
  const logFile = join(o.dir, 'metrics-server.log');
  let stop = () => rm(o.dir, { recursive: true, force: true });
  try {
    const { files, servingCaPem } = await writeFiles(o);
    // A port found free can be taken before metrics-server binds it (an outgoing connection's ephemeral
    // port on the same address): then it starts again on another.
    for (let attempt = 1; ; attempt++) {
      const port = await freePort();
      // First: at start-up it reads the aggregator's client CA from kube-system, which its RBAC allows.
      await applyManifests(o.clients, await metricsServerObjects({ address: o.address, port, caPem: servingCaPem }));
      const child = spawnHostService(
        [o.clusterBinary, 'metrics-server', ...metricsServerArgs({ address: o.address, port, files })],
        logFile,
      );
      stop = async () => {
        await child.stop();
        await rm(o.dir, { recursive: true, force: true });
      };
      const start = await awaitServiceReady(child, {
        what: METRICS_SERVER_APISERVICE,
        logFile,
        timeoutMs: READY_TIMEOUT_MS,
        intervalMs: 500,
        probe: async () => {
          const state = await apiServiceAvailable(o.clients);
          return { ready: state.available, detail: state.message ?? 'no condition' };
        },
      });
      if (start.kind === 'ready') {
        o.log.info({ address: o.address, port, pid: child.pid }, `metrics-server serves ${METRICS_SERVER_APISERVICE}`);
        break;
      }
      if (!/address already in use/.test(start.logTail) || attempt >= 3)
        throw new Error(`metrics-server exited (${start.why}):\n${start.logTail}`);
      o.log.warn({ address: o.address, port }, 'metrics-server found its port taken; starting it on another');
      await child.stop();
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { stop };
}

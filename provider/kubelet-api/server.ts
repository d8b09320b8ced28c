// The kubelet HTTPS API. Every route group is a plugin registered after auth,
// so nothing can bypass authentication and authorization.
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { Logger } from '../log.js';
import { auth, type AuthBackend } from './auth.js';
import { errorHandler } from './errors.js';
import { podsRoutes, type PodLister } from './routes/pods.js';
import { healthRoutes } from './routes/health.js';
import type { Registry } from 'prom-client';
import { agentMetrics } from '../metrics.js';
import { readBootTime, readNodeUsage } from '../node/usage.js';
import { statsRoutes, type NodeStatsSource } from './routes/stats.js';
import type { VmAccess } from './vm-access.js';
import { routeUpgradesThroughFastify } from './upgrade.js';
import { logRoutes } from './routes/logs.js';
import { execAttachRoutes } from './routes/exec-attach.js';

export interface TlsMaterial {
  certPem: string;
  keyPem: string;
  /** CA that client certificates must chain to. */
  clientCaPem: string;
}

export interface KubeletApiOptions {
  nodeName: string;
  backend: AuthBackend;
  /** Absent only in tests that use inject(). */
  tls?: TlsMaterial;
  listPods: PodLister;
  log: Logger;
  /** The node's VMs. Absent until the agent wires its launchers: stats then list no pods. */
  vms?: VmAccess;
  /** Node-level CPU and memory; default: this host's /proc. */
  nodeStats?: NodeStatsSource;
  /** The agent's own metrics on /metrics; default: agentMetrics.registry. */
  metricsRegistry?: Registry;
}

export async function buildKubeletApi(opts: KubeletApiOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: opts.log.child({ component: 'kubelet-api' }),
    logController: new LogController({ disableRequestLogging: true }),
    ...(opts.tls
      ? {
          https: {
            cert: opts.tls.certPem,
            key: opts.tls.keyPem,
            ca: opts.tls.clientCaPem,
            // Ask for a client certificate but let auth decide, so a missing or
            // foreign certificate gets a 401 rather than a handshake failure.
            requestCert: true,
            rejectUnauthorized: false,
          },
        }
      : {}),
  }) as unknown as FastifyInstance;
  app.setErrorHandler(errorHandler);
  routeUpgradesThroughFastify(app);
  await app.register(auth, { nodeName: opts.nodeName, backend: opts.backend });
  await app.register(healthRoutes);
  await app.register(podsRoutes, { listPods: opts.listPods });
  const vms = opts.vms;
  await app.register(statsRoutes, {
    nodeName: opts.nodeName,
    node: opts.nodeStats ?? { startTime: await readBootTime(), readUsage: () => readNodeUsage() },
    listVmUsage: vms ? () => vms.listVmUsage() : async () => [],
    registry: opts.metricsRegistry ?? agentMetrics.registry,
  });
  // Without VMs there are no logs or consoles to reach: those paths are 404s.
  if (vms) {
    await app.register(logRoutes, { vms });
    await app.register(execAttachRoutes, { vms });
  }
  return app;
}

/** Swap the serving certificate on a running server (rotation). */
export function rotateServingCert(app: FastifyInstance, tls: TlsMaterial): void {
  const server = app.server as unknown as { setSecureContext?: (o: object) => void };
  server.setSecureContext?.({ cert: tls.certPem, key: tls.keyPem, ca: tls.clientCaPem, requestCert: true, rejectUnauthorized: false });
}

/** Unauthenticated liveness on loopback only, like the kubelet's :10248/healthz. */
export async function buildHealthzServer(healthy: () => boolean, log: Logger): Promise<FastifyInstance> {
  const app = Fastify({ loggerInstance: log.child({ component: 'healthz' }), logController: new LogController({ disableRequestLogging: true }) }) as unknown as FastifyInstance;
  app.get('/healthz', async (_req, reply) => {
    const ok = healthy();
    return reply.code(ok ? 200 : 503).type('text/plain').send(ok ? 'ok' : 'unhealthy');
  });
  return app;
}

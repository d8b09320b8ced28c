// The kubelet HTTPS API. Every route group is a plugin registered after auth,
// so nothing can bypass authentication and authorization.
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { Logger } from '../log.js';
import { auth, type AuthBackend } from './auth.js';
import { errorHandler } from './errors.js';
import { podsRoutes, type PodLister } from './routes/pods.js';
import { healthRoutes } from './routes/health.js';
import { agentMetrics, type AgentMetrics } from '../metrics.js';
import { readBootTime, readNodeUsage } from '../node/usage.js';
import { statsRoutes, type NodeStatsSource, type StatsRoutesOptions } from './routes/stats.js';
import type { VmAccess } from './vm-access.js';
import { routeUpgradesThroughFastify } from './upgrade.js';
import { logRoutes } from './routes/logs.js';
import { execAttachRoutes } from './routes/exec-attach.js';
import { portForwardRoutes } from './routes/port-forward.js';
import { vncRoutes } from './routes/vnc.js';
import { vmiSubresourceRoutes } from './routes/vmi-subresources.js';
import { vmiPortForwardRoutes } from './routes/vmi-port-forward.js';
import { DEFAULT_SESSION_LIMITS, SessionLimiter, type SessionLimits } from './session-limiter.js';
import { DEFAULT_IDLE_TIMEOUT_MS } from './streaming/idle-timer.js';

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
  /** Published CSI volumes' usage (the CSI node side's cache); absent: the summary lists no volumes. */
  volumeStats?: StatsRoutesOptions['volumeStats'];
  /** Node-level CPU and memory; default: this host's /proc. */
  nodeStats?: NodeStatsSource;
  /** The agent's own metrics, served on /metrics and counting streaming sessions; default: agentMetrics. */
  metrics?: AgentMetrics;
  /** Caps on concurrent exec, attach, log follow, port-forward and VNC sessions; default DEFAULT_SESSION_LIMITS. */
  sessionLimits?: SessionLimits;
  /** A console, port-forward or VNC session without traffic for this long is closed; default the kubelet's 4 h. */
  streamingIdleTimeoutMs?: number;
}

export async function buildKubeletApi(opts: KubeletApiOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: opts.log.child({ component: 'kubelet-api' }),
    logController: new LogController({ disableRequestLogging: true }),
    // Stopping cuts the API server's and metrics-server's kept-alive connections rather than wait for them.
    forceCloseConnections: true,
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
  const metrics = opts.metrics ?? agentMetrics;
  await app.register(statsRoutes, {
    nodeName: opts.nodeName,
    node: opts.nodeStats ?? { startTime: await readBootTime(), readUsage: () => readNodeUsage() },
    listVmUsage: vms ? () => vms.listVmUsage() : async () => [],
    registry: metrics.registry,
    ...(opts.volumeStats ? { volumeStats: opts.volumeStats } : {}),
  });
  // Without VMs there are no logs, consoles, ports or displays to reach: those paths are 404s.
  if (vms) {
    // One limiter for both route groups: the caps count every kind of session together.
    const sessions = new SessionLimiter(opts.sessionLimits ?? DEFAULT_SESSION_LIMITS, opts.nodeName, metrics);
    await app.register(logRoutes, { vms, sessions });
    const idleTimeoutMs = opts.streamingIdleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    await app.register(execAttachRoutes, { vms, sessions, idleTimeoutMs });
    await app.register(portForwardRoutes, { vms, sessions, idleTimeoutMs });
    await app.register(vncRoutes, { vms, sessions, idleTimeoutMs });
    await app.register(vmiSubresourceRoutes, { vms, sessions, idleTimeoutMs });
    await app.register(vmiPortForwardRoutes, { vms, sessions, idleTimeoutMs });
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
  const app = Fastify({
    loggerInstance: log.child({ component: 'healthz' }),
    logController: new LogController({ disableRequestLogging: true }),
  }) as unknown as FastifyInstance;
  app.get('/healthz', async (_req, reply) => {
    const ok = healthy();
    return reply
      .code(ok ? 200 : 503)
      .type('text/plain')
      .send(ok ? 'ok' : 'unhealthy');
  });
  return app;
}

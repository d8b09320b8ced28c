// KubeVirt's subresource API (group subresources.kubevirt.io, v1) as an
// aggregated API server: HTTPS whose clients are the kube-apiserver's front
// proxy, and the admission webhook on pods/eviction, whose client is the
// kube-apiserver itself. Every route group is a plugin registered after auth, so nothing
// bypasses authentication and authorization; one error handler answers
// metav1.Status.
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { KubeClients } from '../kube/client.js';
import type { EventRecorder } from '../kube/events.js';
import type { KubevirtApi } from '../kubevirt/client.js';
import type { EvictionStrategy } from '../kubevirt/types.js';
import type { Logger } from '../log.js';
import { routeUpgradesThroughFastify } from '../kubelet-api/upgrade.js';
import { subresourceAuth, type Authorizer, type RequestHeaderConfig } from './auth.js';
import { errorHandler } from './errors.js';
import { vmiStreamRoutes } from './routes/vmi-streams.js';
import { expandRoutes } from './routes/expand.js';
import type { Instancetypes } from '../controllers/instancetypes.js';
import type { VmiNodeClient } from './vmi-node.js';
import { discoveryRoutes } from './routes/discovery.js';
import { vmRoutes } from './routes/vm.js';
import { migrateRoutes } from './routes/migrate.js';
import { vmiRoutes } from './routes/vmi.js';
import type { ServingCert } from './serving-cert.js';
import { podEvictionRoutes } from './admission/pod-eviction.js';

export interface SubresourceApiOptions {
  requestHeader: RequestHeaderConfig;
  authorizer: Authorizer;
  kubevirt: KubevirtApi;
  /** Expands the instancetypes and preferences VMs name (virtctl expand). */
  instancetypes: Pick<Instancetypes, 'expand'>;
  clients: KubeClients;
  /** The VMIs' nodes, for what only a node can do (console, guest agent, reboot). */
  nodes: VmiNodeClient;
  /** Events on the objects the server acts on (a VMI whose eviction is blocked). */
  events: EventRecorder;
  /** The cluster's evictionStrategy, for VMIs that set none (KubeVirt's default: None). */
  evictionStrategy: EvictionStrategy;
  /** Absent only in tests that use inject(). */
  tls?: ServingCert;
  log: Logger;
}

/** Small JSON bodies only (options objects); KubeVirt reads at most 1 KiB of them. */
const BODY_LIMIT_BYTES = 64 * 1024;

export async function buildSubresourceApi(opts: SubresourceApiOptions): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: opts.log.child({ component: 'subresource-api' }),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT_BYTES,
    // Stopping cuts the aggregator's kept-alive connections rather than wait for them to idle out.
    forceCloseConnections: true,
    ...(opts.tls
      ? {
          https: {
            cert: opts.tls.certPem,
            key: opts.tls.keyPem,
            ca: opts.requestHeader.clientCaPem,
            // Ask for the front proxy's certificate but let auth decide, so a missing one is a 401 Status.
            requestCert: true,
            rejectUnauthorized: false,
          },
        }
      : {}),
  }) as unknown as FastifyInstance;
  app.setErrorHandler(errorHandler);
  // Options bodies are JSON whatever their content type (KubeVirt decodes any body as YAML or JSON), and
  // an empty body is no options, as KubeVirt's decoder takes io.EOF.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, body === '' ? {} : JSON.parse(body as string));
    } catch (err) {
      (err as { statusCode?: number }).statusCode = 400;
      done(err as Error, undefined);
    }
  });
  routeUpgradesThroughFastify(app);
  await app.register(subresourceAuth, { requestHeader: opts.requestHeader, authorizer: opts.authorizer, publicPaths: ['/healthz'] });
  await app.register(discoveryRoutes);
  await app.register(vmRoutes, { kubevirt: opts.kubevirt, clients: opts.clients });
  await app.register(migrateRoutes, { kubevirt: opts.kubevirt });
  await app.register(vmiRoutes, { kubevirt: opts.kubevirt, nodes: opts.nodes });
  await app.register(vmiStreamRoutes, { kubevirt: opts.kubevirt, nodes: opts.nodes });
  await app.register(expandRoutes, { kubevirt: opts.kubevirt, instancetypes: opts.instancetypes });
  await app.register(podEvictionRoutes, {
    clients: opts.clients,
    kubevirt: opts.kubevirt,
    events: opts.events,
    evictionStrategy: opts.evictionStrategy,
  });
  return app;
}

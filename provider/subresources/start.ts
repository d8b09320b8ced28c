// Runs the subresource API beside the controllers: reads the aggregator's
// requestheader settings, loads or makes the serving certificate, listens,
// and offers register() for the leading process to point the APIService here.
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { KubeClients } from '../kube/client.js';
import { KubevirtApi } from '../kubevirt/client.js';
import { Instancetypes, kubeInstancetypeStore } from '../controllers/instancetypes.js';
import { createEventRecorder } from '../kube/events.js';
import type { EvictionStrategy } from '../kubevirt/types.js';
import type { Logger } from '../log.js';
import { readRequestHeaderConfig, subjectAccessReviewer } from './kube-backend.js';
import { VmiNodeClient } from './vmi-node.js';
import { register, SERVICE_DNS_NAME, SUBRESOURCES_SERVICE } from './registration.js';
import { buildSubresourceApi } from './server.js';
import { ensureServingCert } from './serving-cert.js';
import { ConfigError } from '../config.js';

export interface SubresourceApiListen {
  /** The address the kube-apiserver reaches this host at; the server listens there. */
  address: string;
  /** 0 picks a free port. */
  port: number;
  /** The cluster's evictionStrategy (default None, as KubeVirt's). */
  evictionStrategy?: EvictionStrategy;
}

export interface RunningSubresourceApi {
  readonly port: number;
  /** Points the APIService and its Endpoints at this server. */
  register(): Promise<void>;
  close(): Promise<void>;
}

export const SERVING_SECRET = { namespace: SUBRESOURCES_SERVICE.namespace, name: 'vkvm-subresources-tls' } as const;

export async function startSubresourceApi(clients: KubeClients, log: Logger, listen: SubresourceApiListen): Promise<RunningSubresourceApi> {
  const [requestHeader, tls] = await Promise.all([
    readRequestHeaderConfig(clients),
    ensureServingCert(clients, SERVING_SECRET, SERVICE_DNS_NAME),
  ]);
  const app = await buildSubresourceApi({
    requestHeader,
    authorizer: subjectAccessReviewer(clients),
    kubevirt: new KubevirtApi(clients),
    instancetypes: new Instancetypes(kubeInstancetypeStore(clients)),
    clients,
    nodes: new VmiNodeClient(clients.kc, (name) => clients.core.readNode({ name })),
    // KubeVirt's virt-api records the eviction webhook's events.
    events: createEventRecorder(clients, { component: 'virt-api', host: hostname() }, log.child({ component: 'subresource-api-events' })),
    evictionStrategy: listen.evictionStrategy ?? 'None',
    tls,
    log,
  });
  await app.listen({ host: listen.address, port: listen.port });
  const port = (app.server.address() as AddressInfo).port;
  log.info({ component: 'subresource-api', address: listen.address, port }, 'subresource API listening');
  return {
    port,
    register: () => register(clients, { address: listen.address, port, caPem: tls.certPem }),
    close: () => app.close(),
  };
}

/** virt-api's port. */
export const DEFAULT_SUBRESOURCES_PORT = 8443;

export function parsePort(flag: string, value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(flag, `${JSON.stringify(value)} is not a port`);
  return port;
}

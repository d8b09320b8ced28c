// Registers the running subresource API with the aggregation layer: the
// Service and APIService from deploy/subresources-api.yaml, the eviction
// webhook from deploy/eviction-webhook.yaml, their caBundle (this server's
// certificate), and Endpoints naming this process's
// address. Idempotent (server-side apply); the leading controllers process
// runs it, so the Endpoints follow leadership.
import { join } from 'node:path';
import type { KubernetesObject } from '@kubernetes/client-node';
import { applyManifests, readManifests } from '../kube/apply.js';
import type { KubeClients } from '../kube/client.js';
import { packageRoot } from '../package-root.js';

export const SUBRESOURCES_SERVICE = { namespace: 'kube-system', name: 'vkvm-subresources' } as const;
/** The name the aggregator verifies the serving certificate against. */
export const SERVICE_DNS_NAME = `${SUBRESOURCES_SERVICE.name}.${SUBRESOURCES_SERVICE.namespace}.svc`;

export interface Registration {
  /** Where this server listens, as the kube-apiserver reaches it (not loopback: Endpoints refuse it). */
  address: string;
  port: number;
  caPem: string;
}

interface WebhookConfiguration extends KubernetesObject {
  webhooks: Array<{ clientConfig: Record<string, unknown> }>;
}

export async function registrationObjects(r: Registration): Promise<KubernetesObject[]> {
  const objects = await readManifests(join(packageRoot(), 'deploy', 'subresources-api.yaml'));
  const webhooks = (await readManifests(join(packageRoot(), 'deploy', 'eviction-webhook.yaml'))) as WebhookConfiguration[];
  const caBundle = Buffer.from(r.caPem).toString('base64');
  const endpoints = {
    apiVersion: 'v1',
    kind: 'Endpoints',
    metadata: { ...SUBRESOURCES_SERVICE, labels: { 'app.kubernetes.io/part-of': 'vkvm' } },
    subsets: [{ addresses: [{ ip: r.address }], ports: [{ name: 'https', port: r.port, protocol: 'TCP' }] }],
  };
  return [
    ...objects.map((o) => (o.kind === 'APIService' ? { ...o, spec: { ...(o as { spec: object }).spec, caBundle } } : o)),
    ...webhooks.map((w) => ({ ...w, webhooks: w.webhooks.map((h) => ({ ...h, clientConfig: { ...h.clientConfig, caBundle } })) })),
    endpoints,
  ];
}

export async function register(clients: KubeClients, r: Registration): Promise<void> {
  await applyManifests(clients, await registrationObjects(r));
}

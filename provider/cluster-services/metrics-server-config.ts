// What `vkvm up`'s metrics-server is given (metrics-server.ts runs it): its
// command line and the objects that register it with the
// aggregation layer (deploy/metrics-server.yaml, with this server's caBundle
// and Endpoints naming its address).
import { join } from 'node:path';
import type { KubernetesObject } from '@kubernetes/client-node';
import { readManifests } from '../kube/apply.js';
import { packageRoot } from '../package-root.js';

export const METRICS_SERVER_SERVICE = { namespace: 'kube-system', name: 'metrics-server' } as const;
/** The name the aggregator verifies the serving certificate against. */
export const METRICS_SERVER_DNS_NAME = `${METRICS_SERVER_SERVICE.name}.${METRICS_SERVER_SERVICE.namespace}.svc`;
/** The user of its client certificate, bound to upstream's roles in deploy/metrics-server.yaml. */
export const METRICS_SERVER_USER = 'system:metrics-server';
export const METRICS_SERVER_APISERVICE = 'v1beta1.metrics.k8s.io';
/** How often it scrapes the nodes; the HPA controller syncs every 15 s. */
export const METRIC_RESOLUTION = '15s';

export interface MetricsServerFiles {
  kubeconfig: string;
  servingCert: string;
  servingKey: string;
  /** The cluster CA, which signs every node's kubelet serving certificate (CSR signer kubernetes.io/kubelet-serving). */
  kubeletCa: string;
}

/** The arguments of `vkvm-cluster metrics-server`. */
export function metricsServerArgs(o: { address: string; port: number; files: MetricsServerFiles }): string[] {
  const { kubeconfig, servingCert, servingKey, kubeletCa } = o.files;
  return [
    `--bind-address=${o.address}`,
    `--secure-port=${o.port}`,
    `--tls-cert-file=${servingCert}`,
    `--tls-private-key-file=${servingKey}`,
    `--kubeconfig=${kubeconfig}`,
    // Its clients' identities (the aggregator's request headers) and their
    // rights are checked against the API server, as an aggregated API does.
    `--authentication-kubeconfig=${kubeconfig}`,
    `--authorization-kubeconfig=${kubeconfig}`,
    // vkvm nodes serve the kubelet API at their InternalIP on the port in
    // status.daemonEndpoints, with a certificate the cluster CA signed for
    // that address: verified, never --kubelet-insecure-tls.
    '--kubelet-preferred-address-types=InternalIP',
    '--kubelet-use-node-status-port',
    `--kubelet-certificate-authority=${kubeletCa}`,
    `--metric-resolution=${METRIC_RESOLUTION}`,
    '--profiling=false',
  ];
}

/** deploy/metrics-server.yaml with the APIService's caBundle, plus Endpoints at the server's address. */
export async function metricsServerObjects(o: { address: string; port: number; caPem: string }): Promise<KubernetesObject[]> {
  const objects = await readManifests(join(packageRoot(), 'deploy', 'metrics-server.yaml'));
  const caBundle = Buffer.from(o.caPem).toString('base64');
  const endpoints = {
    apiVersion: 'v1',
    kind: 'Endpoints',
    metadata: { ...METRICS_SERVER_SERVICE, labels: { 'app.kubernetes.io/part-of': 'vkvm' } },
    subsets: [{ addresses: [{ ip: o.address }], ports: [{ name: 'https', port: o.port, protocol: 'TCP' }] }],
  };
  return [
    ...objects.map((obj) => (obj.kind === 'APIService' ? { ...obj, spec: { ...(obj as { spec: object }).spec, caBundle } } : obj)),
    endpoints,
  ];
}

// The names and addresses the API server answers to. No node may hold one in
// a certificate the cluster CA signs: it would impersonate the API server to
// every client whose kubeconfig trusts that CA. Gathered afresh for each
// decision from what the cluster and the connection show: the
// default/kubernetes EndpointSlice (the addresses the API servers advertise),
// the host of the server URL these controllers use, and the SANs of the
// certificate the API server presents there (its external DNS names and
// load-balancer addresses, as the operator issued it).
import { isIP } from 'node:net';
import { connect } from 'node:tls';
import { DiscoveryV1Api } from '@kubernetes/client-node';
import ipaddr from 'ipaddr.js';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';

/** A SAN as compared: an IP in one textual form, a DNS name in lower case without a trailing dot. */
export function sanKey(value: string): string {
  return isIP(value) ? ipaddr.process(value).toString() : value.toLowerCase().replace(/\.$/, '');
}

/** Each name or address (as sanKey) with where it was seen. */
export type ApiServerNames = ReadonlyMap<string, readonly string[]>;

const PROBE_TIMEOUT_MS = 5000;

/** DNS and IP SANs of the certificate a TLS server presents. Not verified: these names are only ever refused. */
export function presentedNames(host: string, port: number, servername: string | undefined): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, rejectUnauthorized: false, ...(servername && !isIP(servername) ? { servername } : {}) }, () => {
      const sans = socket.getPeerCertificate().subjectaltname ?? '';
      socket.destroy();
      resolve(sans.split(',').flatMap((entry) => /^\s*(?:DNS|IP Address):(.+)$/.exec(entry)?.[1]?.trim() ?? []));
    });
    socket.setTimeout(PROBE_TIMEOUT_MS, () => socket.destroy(new Error(`no TLS handshake with ${host}:${port} in ${PROBE_TIMEOUT_MS} ms`)));
    socket.once('error', reject);
  });
}

export async function apiServerNames(clients: KubeClients, log: Logger): Promise<ApiServerNames> {
  const names = new Map<string, string[]>();
  const add = (value: string, source: string) => {
    const key = sanKey(value);
    const sources = names.get(key) ?? [];
    if (!sources.includes(source)) names.set(key, [...sources, source]);
  };
  try {
    const slice = await clients.kc.makeApiClient(DiscoveryV1Api).readNamespacedEndpointSlice({ name: 'kubernetes', namespace: 'default' });
    for (const endpoint of slice.endpoints ?? []) for (const address of endpoint.addresses) add(address, 'kubernetes EndpointSlice');
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  const cluster = clients.kc.getCurrentCluster();
  if (cluster) {
    const url = new URL(cluster.server);
    // URL keeps an IPv6 host in brackets.
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    add(host, 'kubeconfig server');
    try {
      const port = Number(url.port || 443);
      for (const name of await presentedNames(host, port, cluster.tlsServerName ?? host)) add(name, 'serving certificate');
    } catch (err) {
      log.debug(
        { err, server: cluster.server },
        "could not read the API server's certificate; its names come from the EndpointSlice and kubeconfig only",
      );
    }
  }
  return names;
}

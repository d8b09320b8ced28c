// The relay's TLS: 1.3 only, both ends authenticated with the nodes' own
// certificates (the kubelet-serving certificate serves, the node client
// certificate dials), trust being the cluster CA from the agent's kubeconfig.
import type { Duplex } from 'node:stream';
import type { SecureContextOptions } from 'node:tls';
import { readFile } from 'node:fs/promises';
import type { KubeConfig } from '@kubernetes/client-node';

export interface RelayCredentials {
  /** The CA both ends' certificates chain to. */
  caPem: string;
  certPem: string;
  keyPem: string;
}

/** TCP keepalive idle time on both legs; the probe interval and count are the host's (net.ipv4.tcp_keepalive_*). */
export const KEEPALIVE_IDLE_MS = 5_000;
/** A stream must say what it is within this time of connecting. */
export const HEADER_TIMEOUT_MS = 10_000;

export function relayTlsOptions(c: RelayCredentials): SecureContextOptions {
  return { ca: c.caPem, cert: c.certPem, key: c.keyPem, minVersion: 'TLSv1.3', maxVersion: 'TLSv1.3' };
}

/** Keepalive on a TCP leg so that a lost peer host closes it (a dead process resets it at once anyway). */
export function keepAlive(socket: Duplex & { setKeepAlive(enable: boolean, delayMs: number): unknown; setNoDelay(): unknown }): void {
  socket.setKeepAlive(true, KEEPALIVE_IDLE_MS);
  socket.setNoDelay();
}

/**
 * The node's client credentials as the kubeconfig names them, read afresh on
 * every call, so a certificate the rotator replaced (certs/client.ts) is used
 * from the next stream on. Throws when the kubeconfig's user has no client
 * certificate (a token, say): the relay cannot dial as the node then.
 */
export async function kubeconfigClientCredentials(kc: KubeConfig): Promise<RelayCredentials> {
  const cluster = kc.getCurrentCluster();
  const user = kc.getCurrentUser();
  const pem = async (data: string | undefined, file: string | undefined, what: string): Promise<string> => {
    if (data) return Buffer.from(data, 'base64').toString('utf8');
    if (file) return readFile(file, 'utf8');
    throw new Error(`the kubeconfig names no ${what}; the migration relay dials with the node's client certificate`);
  };
  return {
    caPem: await pem(cluster?.caData, cluster?.caFile, 'cluster CA'),
    certPem: await pem(user?.certData, user?.certFile, 'client certificate'),
    keyPem: await pem(user?.keyData, user?.keyFile, 'client key'),
  };
}

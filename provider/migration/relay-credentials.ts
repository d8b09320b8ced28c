// The certificate the node's relay dials with: the node's own client
// certificate (CN system:node:<name>, O system:nodes), which the target's
// relay takes the peer's name from. A joined node's kubeconfig names it. An
// agent running with other credentials (vkvm up's first node runs with the
// admin kubeconfig) requests one with them, once, through the CSR API
// (kube-controller-manager approves a kubelet client certificate asked for by
// someone allowed to), keeps it in its private PKI directory, and asks again
// when it nears its end.
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { obtainClientCertificate } from '../certs/client.js';
import { clusterCaPem, type KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { kubeconfigClientCredentials, type RelayCredentials } from './relay-tls.js';

/** A certificate this close to its end is replaced before it is used. */
const RENEW_BEFORE_MS = 60 * 60_000;

/** Whether `certPem` is node `nodeName`'s client certificate and valid for a while yet. */
export function isNodeCertificate(certPem: string, nodeName: string, nowMs = Date.now()): boolean {
  try {
    const cert = new X509Certificate(certPem);
    const subject = cert.subject.split('\n');
    return (
      subject.includes(`CN=system:node:${nodeName}`) &&
      subject.includes('O=system:nodes') &&
      new Date(cert.validTo).getTime() - nowMs > RENEW_BEFORE_MS
    );
  } catch {
    return false;
  }
}

export function relayClientCredentials(
  clients: KubeClients,
  o: { nodeName: string; pemPath: string; log: Logger },
): () => Promise<RelayCredentials> {
  let obtaining: Promise<unknown> | undefined;
  return async () => {
    const given = await kubeconfigClientCredentials(clients.kc).catch(() => undefined);
    if (given && isNodeCertificate(given.certPem, o.nodeName)) return given;
    const caPem = given?.caPem ?? (await clusterCaPem(clients.kc));
    const kept = await readFile(o.pemPath, 'utf8').catch(() => '');
    if (isNodeCertificate(kept, o.nodeName)) return { caPem, certPem: kept, keyPem: kept };
    obtaining ??= obtainClientCertificate(clients, { nodeName: o.nodeName, pemPath: o.pemPath, issueTimeoutMs: 60_000 })
      .then(({ csrName }) => o.log.info({ csr: csrName }, 'obtained a node client certificate for the migration relay'))
      .finally(() => (obtaining = undefined));
    await obtaining;
    const pem = await readFile(o.pemPath, 'utf8');
    return { caPem, certPem: pem, keyPem: pem };
  };
}

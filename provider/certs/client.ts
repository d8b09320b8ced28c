// The node's client certificate (user system:node:<name>, group
// system:nodes), as the kubelet's TLS bootstrap: the first one is requested
// with a bootstrap token, later ones with the current certificate. The
// kube-controller-manager approves both kinds (csrapproving, given the
// bootstrap RBAC) and signs them. Certificate and key live in one PEM file
// that the kubeconfig names for both, replaced by rename, so a request never
// pairs a new certificate with an old key; client-node re-reads the file on
// every request, so a renewal needs no restart.
import { mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { stringify } from 'yaml';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { certFacts, renewalTime, type CsrSubject } from './csr.js';
import { writeAtomic } from '../atomic-file.js';
import { requestCertificate } from './csr-api.js';

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
/** What KCM's csrapproving accepts for an EC key: exactly these usages, no SANs, O=system:nodes. */
const CLIENT_USAGES = ['digital signature', 'client auth'];

export const clientSubject = (nodeName: string): CsrSubject => ({
  commonName: `system:node:${nodeName}`,
  organizations: ['system:nodes'],
  dnsNames: [],
  ipAddresses: [],
});

/** Requests a client certificate and writes it with its key to `pemPath` (mode 0600). */
export async function obtainClientCertificate(
  clients: KubeClients,
  opts: { nodeName: string; pemPath: string; issueTimeoutMs?: number },
): Promise<{ csrName: string; certPem: string }> {
  const issued = await requestCertificate(clients, {
    namePrefix: `node-csr-${opts.nodeName}`,
    signerName: KUBELET_CLIENT_SIGNER,
    usages: CLIENT_USAGES,
    subject: clientSubject(opts.nodeName),
    ...(opts.issueTimeoutMs ? { issueTimeoutMs: opts.issueTimeoutMs } : {}),
  });
  // The file is 0600 whatever the directory; a directory that exists is the operator's (the kubeconfig names it) and keeps its mode.
  await mkdir(dirname(opts.pemPath), { recursive: true, mode: 0o700 });
  await writeAtomic(opts.pemPath, `${issued.certPem.trim()}\n${issued.keyPem.trim()}\n`, 0o600);
  return { csrName: issued.csrName, certPem: issued.certPem };
}

/** A kubeconfig for the node identity whose credentials are the rotating PEM file. */
export function nodeKubeconfig(opts: { server: string; caPem: string; nodeName: string; pemPath: string }): string {
  return clientCertKubeconfig({ ...opts, user: `system:node:${opts.nodeName}` });
}

/** A kubeconfig whose credentials are a client certificate and its key in one PEM file. */
export function clientCertKubeconfig(opts: { server: string; caPem: string; user: string; pemPath: string }): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      { name: 'vkvm', cluster: { server: opts.server, 'certificate-authority-data': Buffer.from(opts.caPem).toString('base64') } },
    ],
    users: [{ name: opts.user, user: { 'client-certificate': opts.pemPath, 'client-key': opts.pemPath } }],
    contexts: [{ name: 'vkvm', context: { cluster: 'vkvm', user: opts.user } }],
    'current-context': 'vkvm',
  });
}

/** Renews the client certificate at 70–90 % of its lifetime, with the node's own credentials. */
export class ClientCertRotator {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly clients: KubeClients,
    private readonly opts: { nodeName: string; pemPath: string },
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    const facts = certFacts(await readFile(this.opts.pemPath, 'utf8'));
    this.schedule(renewalTime(facts));
  }

  stop(): void {
    clearTimeout(this.timer);
  }

  private schedule(at: Date): void {
    // setTimeout overflows past ~24.8 days; re-check at most daily.
    const delayMs = Math.min(Math.max(at.getTime() - Date.now(), 1000), 24 * 3600 * 1000);
    this.timer = setTimeout(() => void this.tick(at), delayMs);
  }

  private async tick(at: Date): Promise<void> {
    if (at.getTime() > Date.now()) return this.schedule(at);
    try {
      const { csrName, certPem } = await obtainClientCertificate(this.clients, this.opts);
      const facts = certFacts(certPem);
      this.log.info({ csr: csrName, notAfter: facts.notAfter }, 'node client certificate rotated');
      this.schedule(renewalTime(facts));
    } catch (err) {
      this.log.warn({ err }, 'node client certificate renewal failed; retrying in 1 min');
      this.timer = setTimeout(() => void this.tick(at), 60_000);
    }
  }
}

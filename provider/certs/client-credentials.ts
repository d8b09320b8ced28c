// A component's own identity, not the admin's: a client certificate of the
// cluster CA, requested through the CSR API and approved by whoever runs this
// with the right to (vkvm up, as admin), as kubeadm makes its components'
// kubeconfigs. A certificate still valid for a month and of this CA is kept;
// the kubeconfig is written afresh (the server's address may have changed).
import { mkdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { writeAtomic } from '../atomic-file.js';
import { clusterCaPem, type KubeClients } from '../kube/client.js';
import { clientCertKubeconfig } from './client.js';
import { approveCertificateSigningRequest, ensurePrivateDir, requestCertificate } from './csr-api.js';
import { certFacts, signedBy, type CsrSubject } from './csr.js';

const CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client';
const KEEP_WHEN_VALID_FOR_MS = 30 * 24 * 3600 * 1000;

export interface ClientCredentials {
  subject: CsrSubject;
  /** Default `kubernetes.io/kube-apiserver-client`; a node's identity takes the kubelet client signer. */
  signerName?: string;
  /** The CSR's name prefix and the approval's reason and message. */
  csrPrefix: string;
  reason: string;
  message: string;
  server: string;
  caPem: string;
  /** A private directory (made 0700) holding the kubeconfig and the PEM (certificate and key) it names. */
  dir: string;
  kubeconfig: string;
  pem: string;
}

/** Makes sure `o.kubeconfig` names a valid certificate of `o.subject`. */
export async function ensureClientCredentials(admin: KubeClients, o: ClientCredentials): Promise<void> {
  // The state dir, if this makes it, as the agent makes it: QEMU must traverse it.
  await mkdir(dirname(o.dir), { recursive: true, mode: 0o711 });
  await ensurePrivateDir(o.dir);
  const current = /-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/.exec(await readFile(o.pem, 'utf8').catch(() => ''))?.[0];
  const keep =
    current !== undefined && signedBy(current, o.caPem) && certFacts(current).notAfter.getTime() - Date.now() > KEEP_WHEN_VALID_FOR_MS;
  if (!keep) {
    const issued = await requestCertificate(admin, {
      namePrefix: o.csrPrefix,
      signerName: o.signerName ?? CLIENT_SIGNER,
      usages: ['digital signature', 'client auth'],
      subject: o.subject,
      issueTimeoutMs: 60_000,
      onCreated: async (name) => {
        await approveCertificateSigningRequest(admin, name, { reason: o.reason, message: o.message });
      },
    });
    await writeAtomic(o.pem, `${issued.certPem.trim()}\n${issued.keyPem.trim()}\n`, 0o600);
  }
  await writeAtomic(
    o.kubeconfig,
    clientCertKubeconfig({ server: o.server, caPem: o.caPem, user: o.subject.commonName, pemPath: o.pem }),
    0o600,
  );
}

/** A component vkvm up runs beside the control plane, as a user of its own (no groups). */
export interface OwnIdentity {
  /** Its name in the approval's message. */
  name: string;
  /** Its CSR's name is `vkvm-<slug>-…`. */
  slug: string;
  user: string;
  /** Its private directory: `kubeconfig`, and `client.pem` (certificate and key) that it names. */
  dir: string;
}

/** Makes sure `o.dir/kubeconfig` is `o.user`'s, on the cluster `admin` reaches; returns its path. */
export async function ensureOwnIdentity(admin: KubeClients, o: OwnIdentity): Promise<string> {
  const kubeconfig = join(o.dir, 'kubeconfig');
  await ensureClientCredentials(admin, {
    subject: { commonName: o.user, organizations: [], dnsNames: [], ipAddresses: [] },
    csrPrefix: `vkvm-${o.slug}`,
    reason: 'VkvmUpApproved',
    message: `approved by vkvm up for its ${o.name}'s client certificate`,
    server: admin.kc.getCurrentCluster()!.server,
    caPem: await clusterCaPem(admin.kc),
    dir: o.dir,
    kubeconfig,
    pem: join(o.dir, 'client.pem'),
  });
  return kubeconfig;
}

// The provisioner's own identity, not the admin's: a client certificate of
// the cluster CA (user vkvm:csi-provisioner:<node>, group
// vkvm:csi-provisioners, which deploy/csi.yaml binds), requested through the
// CSR API and approved by whoever runs this with the right to (vkvm up, as
// admin), as kubeadm makes its components' kubeconfigs. A certificate still
// valid for a month and of this CA is kept; the kubeconfig is written afresh
// (the server's address may have changed).
import { mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { writeAtomic } from '../atomic-file.js';
import { clientCertKubeconfig } from '../certs/client.js';
import { approveCertificateSigningRequest, ensurePrivateDir, requestCertificate } from '../certs/csr-api.js';
import { certFacts, signedBy } from '../certs/csr.js';
import type { KubeClients } from '../kube/client.js';
import { provisionerSubject, type NodeStoragePaths } from './node-storage-spec.js';

const CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client';
const KEEP_WHEN_VALID_FOR_MS = 30 * 24 * 3600 * 1000;

/** Makes sure `paths.kubeconfig` names a valid certificate of the provisioner of `nodeName`. */
export async function ensureProvisionerCredentials(
  admin: KubeClients,
  o: { nodeName: string; server: string; caPem: string; paths: NodeStoragePaths },
): Promise<void> {
  // The node's state dir, if this makes it, as the agent makes it: QEMU must traverse it.
  await mkdir(dirname(o.paths.dir), { recursive: true, mode: 0o711 });
  await ensurePrivateDir(o.paths.dir);
  const user = provisionerSubject(o.nodeName).commonName;
  const current = /-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/.exec(
    await readFile(o.paths.pem, 'utf8').catch(() => ''),
  )?.[0];
  const keep =
    current !== undefined && signedBy(current, o.caPem) && certFacts(current).notAfter.getTime() - Date.now() > KEEP_WHEN_VALID_FOR_MS;
  if (!keep) {
    const issued = await requestCertificate(admin, {
      namePrefix: `vkvm-csi-provisioner-${o.nodeName}`,
      signerName: CLIENT_SIGNER,
      usages: ['digital signature', 'client auth'],
      subject: provisionerSubject(o.nodeName),
      issueTimeoutMs: 60_000,
      onCreated: async (name) => {
        await approveCertificateSigningRequest(admin, name, {
          reason: 'VkvmCsiProvisioner',
          message: "approved by vkvm for a node's CSI provisioner",
        });
      },
    });
    await writeAtomic(o.paths.pem, `${issued.certPem.trim()}\n${issued.keyPem.trim()}\n`, 0o600);
  }
  await writeAtomic(o.paths.kubeconfig, clientCertKubeconfig({ server: o.server, caPem: o.caPem, user, pemPath: o.paths.pem }), 0o600);
}

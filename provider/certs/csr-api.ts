// One certificate through the CSR API: create the request, then wait until
// it is issued, denied or failed. Shared by the kubelet client and serving
// certificates.
import { randomBytes } from 'node:crypto';
import { chmod, mkdir } from 'node:fs/promises';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { isConflict } from '../kube/errors.js';
import { createKeyAndCsr, type CsrSubject } from './csr.js';

export class CsrDeniedError extends Error {
  readonly kind = 'CsrDenied';
}

export interface CertificateRequest {
  namePrefix: string;
  signerName: string;
  usages: string[];
  subject: CsrSubject;
  issueTimeoutMs?: number;
  /** Called once the CSR exists (the serving manager approves its own here). */
  onCreated?: (name: string) => Promise<void>;
}

export interface IssuedPair {
  csrName: string;
  certPem: string;
  keyPem: string;
}

export async function requestCertificate(clients: KubeClients, req: CertificateRequest): Promise<IssuedPair> {
  const { keyPem, csrPem } = await createKeyAndCsr(req.subject);
  const name = `${req.namePrefix}-${randomBytes(4).toString('hex')}`.slice(0, 253);
  await clients.certificates.createCertificateSigningRequest({
    body: {
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name },
      spec: { request: Buffer.from(csrPem).toString('base64'), signerName: req.signerName, usages: req.usages },
    },
  });
  await req.onCreated?.(name);
  const certPem = await waitIssued(clients, name, req.issueTimeoutMs ?? 10 * 60_000);
  return { csrName: name, certPem, keyPem };
}

async function waitIssued(clients: KubeClients, name: string, timeoutMs: number): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let delayMs = 200;
  let csr: V1CertificateSigningRequest | undefined;
  while (Date.now() < deadline) {
    csr = await clients.certificates.readCertificateSigningRequest({ name });
    const denied = csr.status?.conditions?.find((c) => (c.type === 'Denied' || c.type === 'Failed') && c.status === 'True');
    if (denied) throw new CsrDeniedError(`CSR ${name} ${denied.type.toLowerCase()}: ${denied.reason ?? ''} ${denied.message ?? ''}`.trim());
    if (csr.status?.certificate) return Buffer.from(csr.status.certificate, 'base64').toString('utf8');
    await new Promise((r) => setTimeout(r, delayMs));
    delayMs = Math.min(delayMs * 2, 5000);
  }
  const approved = csr?.status?.conditions?.some((c) => c.type === 'Approved');
  throw new Error(`CSR ${name} not issued in time (${approved ? 'approved but not signed' : 'not approved'})`);
}

/**
 * Approves CSR `name` (the caller needs `approve` on its signer), unless it was
 * decided already: another approver may have been first. True when this approved it.
 * A conflict means another approver wrote between the read and the write
 * (kube-controller-manager approves node client CSRs of an admin at once): read again.
 */
export async function approveCertificateSigningRequest(
  clients: KubeClients,
  name: string,
  why: { reason: string; message: string },
): Promise<boolean> {
  const csr = await clients.certificates.readCertificateSigningRequest({ name });
  if (csr.status?.conditions?.some((c) => c.type === 'Approved' || c.type === 'Denied')) return false;
  const now = new Date();
  csr.status = {
    ...csr.status,
    conditions: [
      ...(csr.status?.conditions ?? []),
      { type: 'Approved', status: 'True', ...why, lastUpdateTime: now, lastTransitionTime: now },
    ],
  };
  try {
    await clients.certificates.replaceCertificateSigningRequestApproval({ name, body: csr });
  } catch (err) {
    if (isConflict(err)) return approveCertificateSigningRequest(clients, name, why);
    throw err;
  }
  return true;
}

/** vkvm's own key directory (STATE_DIR/pki): only root reads it, also when it existed before with a wider mode. */
export async function ensurePrivateDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await chmod(dir, 0o700);
}

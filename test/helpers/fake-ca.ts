// Test support (no production code imports it): a CA and a certificates API
// that signs CSRs as kube-controller-manager does (subject, key and SANs from
// the request), for unit tests of the certificate managers without a cluster.
import { webcrypto } from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { KubeClients } from '../../provider/kube/client.js';

export const EC = { name: 'ECDSA', namedCurve: 'P-256' } as const;
export const SIGN = { name: 'ECDSA', hash: 'SHA-256' } as const;
const SUBJECT_ALT_NAME_OID = '2.5.29.17';

export interface TestCa {
  keys: webcrypto.CryptoKeyPair;
  pem: string;
}

export async function newCa(): Promise<TestCa> {
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=test-ca',
    keys,
    signingAlgorithm: SIGN,
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true)],
  });
  return { keys, pem: cert.toString('pem') };
}

/** A certificate for `publicKey` signed by `ca`, valid from `notBefore` to `notAfter`. */
export async function issue(
  ca: TestCa,
  publicKey: x509.PublicKeyType,
  subject: string,
  notBefore: Date,
  notAfter: Date,
  extensions: x509.Extension[] = [],
): Promise<string> {
  const cert = await x509.X509CertificateGenerator.create({
    subject,
    issuer: 'CN=test-ca',
    notBefore,
    notAfter,
    publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm: SIGN,
    extensions,
  });
  return cert.toString('pem');
}

/** A client certificate and key for common name `cn`, signed by `ca`, valid for an hour (as node's https options take them). */
export async function clientCert(ca: TestCa, cn: string): Promise<{ cert: string; key: string }> {
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const from = new Date(Date.now() - 60_000);
  const cert = await issue(ca, keys.publicKey as unknown as x509.PublicKeyType, `CN=${cn}`, from, new Date(Date.now() + 3600_000));
  const key = x509.PemConverter.encode(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey), 'PRIVATE KEY');
  return { cert, key };
}

/** A certificates API that denies the first `denials` CSRs and issues the rest for a year, SANs copied. */
export function fakeCertificatesApi(ca: TestCa, denials = 0): { clients: KubeClients; created: V1CertificateSigningRequest[] } {
  const created: V1CertificateSigningRequest[] = [];
  const certificates = {
    createCertificateSigningRequest: async ({ body }: { body: V1CertificateSigningRequest }) => {
      created.push(body);
      return body;
    },
    readCertificateSigningRequest: async ({ name }: { name: string }) => {
      const index = created.findIndex((c) => c.metadata?.name === name);
      const csr = created[index]!;
      if (index < denials)
        return { ...csr, status: { conditions: [{ type: 'Denied', status: 'True', reason: 'SANNotOwnedByNode', message: 'no' }] } };
      const req = new x509.Pkcs10CertificateRequest(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
      const sans = req.extensions.filter((e) => e.type === SUBJECT_ALT_NAME_OID);
      const certificate = await issue(ca, req.publicKey, req.subject, new Date(), new Date(Date.now() + 365 * 86400_000), sans);
      return { ...csr, status: { certificate: Buffer.from(certificate).toString('base64') } };
    },
  };
  return { clients: { certificates } as unknown as KubeClients, created };
}

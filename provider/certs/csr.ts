// Key and PKCS#10 request generation, and the certificate facts vkvm checks.
// @peculiar/x509 over Node's WebCrypto: no OpenSSL subprocess, no hand-rolled ASN.1.
import { webcrypto, X509Certificate as NodeX509 } from 'node:crypto';
// @peculiar/x509 resolves its ASN.1 schemas through tsyringe, which needs the polyfill loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

const EC_P256 = { name: 'ECDSA', namedCurve: 'P-256' } as const;

export interface CsrSubject {
  commonName: string;
  organizations: string[];
  dnsNames: string[];
  ipAddresses: string[];
}

export interface KeyAndCsr {
  keyPem: string;
  csrPem: string;
}

function escapeDn(v: string): string {
  return v.replace(/([,+"\\<>;=])/g, '\\$1');
}

export async function createKeyAndCsr(subject: CsrSubject): Promise<KeyAndCsr> {
  const keys = (await webcrypto.subtle.generateKey(EC_P256, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const name = [`CN=${escapeDn(subject.commonName)}`, ...subject.organizations.map((o) => `O=${escapeDn(o)}`)].join(', ');
  const sans = [
    ...subject.dnsNames.map((value) => ({ type: 'dns' as const, value })),
    ...subject.ipAddresses.map((value) => ({ type: 'ip' as const, value })),
  ];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name,
    keys: keys as unknown as x509.Pkcs10CertificateRequestCreateParams['keys'],
    signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
    extensions: sans.length ? [new x509.SubjectAlternativeNameExtension(sans)] : [],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  const keyPem = x509.PemConverter.encode(pkcs8, 'PRIVATE KEY');
  return { keyPem, csrPem: csr.toString('pem') };
}

export interface CertFacts {
  notBefore: Date;
  notAfter: Date;
  dnsNames: string[];
  ipAddresses: string[];
}

export function certFacts(certPem: string): CertFacts {
  const cert = new NodeX509(certPem);
  const names = (cert.subjectAltName ?? '').split(',').map((s) => s.trim());
  return {
    notBefore: new Date(cert.validFrom),
    notAfter: new Date(cert.validTo),
    dnsNames: names.filter((n) => n.startsWith('DNS:')).map((n) => n.slice(4)),
    ipAddresses: names.filter((n) => n.startsWith('IP Address:')).map((n) => n.slice(11)),
  };
}

/** True when the certificate chains directly to the given CA. */
export function signedBy(certPem: string, caPem: string): boolean {
  return new NodeX509(certPem).verify(new NodeX509(caPem).publicKey);
}

/** When to renew: at a random point in 70–90% of the lifetime, as the kubelet does. */
export function renewalTime(facts: CertFacts, random: () => number = Math.random): Date {
  const lifetime = facts.notAfter.getTime() - facts.notBefore.getTime();
  return new Date(facts.notBefore.getTime() + lifetime * (0.7 + 0.2 * random()));
}

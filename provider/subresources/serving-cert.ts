// The subresource API's serving certificate: self-signed for the Service's
// DNS name (the name the aggregator verifies), and published as the
// APIService's caBundle. Kept in a Secret so every controllers process, and
// every restart, serves the same certificate the APIService trusts.
import { webcrypto } from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { KubeClients } from '../kube/client.js';
import { isConflict, isNotFound } from '../kube/errors.js';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

export interface ServingCert {
  certPem: string;
  keyPem: string;
}

const VALID_YEARS = 10;

export async function selfSignedCert(dnsName: string, now = new Date()): Promise<ServingCert> {
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
  const keys = (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const notAfter = new Date(now);
  notAfter.setFullYear(now.getFullYear() + VALID_YEARS);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    name: `CN=${dnsName}`,
    keys: keys as unknown as x509.X509CertificateCreateSelfSignedParams['keys'],
    signingAlgorithm: alg,
    notBefore: new Date(now.getTime() - 3600_000),
    notAfter,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyCertSign, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([{ type: 'dns', value: dnsName }]),
    ],
  });
  const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
  return { certPem: cert.toString('pem'), keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') };
}

const decode = (v: string | undefined) => (v ? Buffer.from(v, 'base64').toString('utf8') : undefined);

/** The certificate in the Secret, made and stored first if there is none (the first writer wins a race). */
export async function ensureServingCert(
  clients: KubeClients,
  secret: { namespace: string; name: string },
  dnsName: string,
): Promise<ServingCert> {
  const read = async (): Promise<ServingCert | undefined> => {
    try {
      const s = await clients.core.readNamespacedSecret(secret);
      const certPem = decode(s.data?.['tls.crt']);
      const keyPem = decode(s.data?.['tls.key']);
      return certPem && keyPem ? { certPem, keyPem } : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
  const existing = await read();
  if (existing) return existing;
  const made = await selfSignedCert(dnsName);
  try {
    await clients.core.createNamespacedSecret({
      namespace: secret.namespace,
      body: {
        metadata: { name: secret.name, labels: { 'app.kubernetes.io/part-of': 'vkvm' } },
        type: 'kubernetes.io/tls',
        stringData: { 'tls.crt': made.certPem, 'tls.key': made.keyPem },
      },
    });
    return made;
  } catch (err) {
    if (!isConflict(err)) throw err;
    const winner = await read();
    if (!winner) throw err;
    return winner;
  }
}

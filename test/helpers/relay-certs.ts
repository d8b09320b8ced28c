// Test support: node certificates as a cluster issues them (client: CN
// system:node:<name>, O system:nodes; serving: the same subject with the
// node's address), signed by a fake CA, as PEM pairs the migration relay takes.
import { webcrypto } from 'node:crypto';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { RelayCredentials } from '../../provider/migration/relay-tls.js';
import { EC, issue, type TestCa } from './fake-ca.js';

function keyPem(der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64');
  return `-----BEGIN PRIVATE KEY-----\n${b64.match(/.{1,64}/g)!.join('\n')}\n-----END PRIVATE KEY-----\n`;
}

/** A certificate and key for `subject` (an X.500 name such as "CN=system:node:a, O=system:nodes"), valid for a day. */
export async function issuePair(ca: TestCa, subject: string, opts: { ip?: string; usage: 'client' | 'server' }): Promise<RelayCredentials> {
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const extensions: x509.Extension[] = [
    new x509.ExtendedKeyUsageExtension([opts.usage === 'client' ? x509.ExtendedKeyUsage.clientAuth : x509.ExtendedKeyUsage.serverAuth]),
  ];
  if (opts.ip) extensions.push(new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: opts.ip }]));
  const now = Date.now();
  const certPem = await issue(ca, keys.publicKey, subject, new Date(now - 60_000), new Date(now + 86_400_000), extensions);
  return { caPem: ca.pem, certPem, keyPem: keyPem(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)) };
}

/** The pair a node's client certificate makes. */
export const nodeClientPair = (ca: TestCa, node: string): Promise<RelayCredentials> =>
  issuePair(ca, `CN=system:node:${node}, O=system:nodes`, { usage: 'client' });

/** The pair a node's kubelet-serving certificate makes, for `ip`. */
export const nodeServingPair = (ca: TestCa, node: string, ip = '127.0.0.1'): Promise<RelayCredentials> =>
  issuePair(ca, `CN=system:node:${node}, O=system:nodes`, { ip, usage: 'server' });

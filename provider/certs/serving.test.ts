// The serving certificate manager against a fake certificates API: a joined
// node's request that is denied (or never approved) is made again until one
// is issued, and stop() ends the waiting.
import { webcrypto } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import t from 'tap';
import { pino } from 'pino';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import { signedBy } from './csr.js';
import { ServingCertManager } from './serving.js';

const EC = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const SIGN = { name: 'ECDSA', hash: 'SHA-256' } as const;
const quiet = pino({ level: 'silent' });

async function newCa() {
  const keys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({ name: 'CN=test-ca', keys, signingAlgorithm: SIGN, extensions: [new x509.BasicConstraintsExtension(true, undefined, true)] });
  return { keys, pem: cert.toString('pem') };
}

/** A certificates API that denies the first `denials` requests and signs the rest with `ca`. */
function certificatesApi(ca: Awaited<ReturnType<typeof newCa>>, denials: number) {
  const created: V1CertificateSigningRequest[] = [];
  const certificates = {
    createCertificateSigningRequest: async ({ body }: { body: V1CertificateSigningRequest }) => {
      created.push(body);
      return body;
    },
    readCertificateSigningRequest: async ({ name }: { name: string }) => {
      const index = created.findIndex((c) => c.metadata?.name === name);
      const csr = created[index]!;
      if (index < denials) return { ...csr, status: { conditions: [{ type: 'Denied', status: 'True', reason: 'SANNotOwnedByNode', message: 'no' }] } };
      const req = new x509.Pkcs10CertificateRequest(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
      const cert = await x509.X509CertificateGenerator.create({
        subject: req.subject,
        issuer: 'CN=test-ca',
        notBefore: new Date(),
        notAfter: new Date(Date.now() + 365 * 86400_000),
        publicKey: req.publicKey,
        signingKey: ca.keys.privateKey,
        signingAlgorithm: SIGN,
        // Its SANs, as kube-controller-manager's signer copies them.
        extensions: req.extensions.filter((e) => e.type === '2.5.29.17'),
      });
      return { ...csr, status: { certificate: Buffer.from(cert.toString('pem')).toString('base64') } };
    },
  };
  return { clients: { certificates } as unknown as KubeClients, created };
}

const options = (dir: string) => ({ nodeName: 'n1', ipAddresses: ['192.0.2.7'], dnsNames: ['n1'], dir, approve: false });

t.test('denied requests are made again until one is issued; the pair is stored for the next start', async (t) => {
  const ca = await newCa();
  const { clients, created } = certificatesApi(ca, 2);
  const dir = join(t.testdir(), 'pki');
  const certs = new ServingCertManager(clients, options(dir), quiet);
  t.teardown(() => certs.stop());
  const pair = await certs.obtain({ initialMs: 10, maxMs: 20 });
  t.same(
    { requests: created.length, chains: signedBy(pair.certPem, ca.pem), keyMode: (await stat(join(dir, 'kubelet-serving.key'))).mode & 0o777, dirMode: (await stat(dir)).mode & 0o777 },
    { requests: 3, chains: true, keyMode: 0o600, dirMode: 0o700 },
    'two denials, then a third request issued by the CA; key 0600 in a 0700 directory',
  );
  const again = new ServingCertManager(certificatesApi(ca, 0).clients, options(dir), quiet);
  t.same(await again.ensure(), pair, 'a restarted agent reuses the stored pair without a request');
});

t.test('stop() ends obtain() between attempts', async (t) => {
  const { clients, created } = certificatesApi(await newCa(), Infinity);
  const certs = new ServingCertManager(clients, options(join(t.testdir(), 'pki')), quiet);
  const obtaining = certs.obtain({ initialMs: 60_000, maxMs: 60_000 });
  while (created.length === 0) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 50));
  certs.stop();
  await t.rejects(obtaining, /stopped before a serving certificate was issued/, 'rejects at once, not after the minute');
  t.equal(created.length, 1, 'no request after stop()');
});

// The client-certificate rotation against a fake certificates API that signs
// like kube-controller-manager: the rotator must replace the PEM file with a
// new certificate and its own key when the old one is due.
import { webcrypto } from 'node:crypto';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import t from 'tap';
import { pino } from 'pino';
import { ClientCertRotator, KUBELET_CLIENT_SIGNER } from './client.js';
import { signedBy } from './csr.js';
import { EC, SIGN, fakeCertificatesApi, issue, newCa } from '../../test/helpers/fake-ca.js';

t.test('a client certificate due for renewal is replaced by a new one, with its key, through a CSR', async (t) => {
  const ca = await newCa();
  const dir = t.testdir();
  const pemPath = join(dir, 'kubelet-client-current.pem');
  // The first certificate is already past 90 % of its lifetime.
  const oldKeys = (await webcrypto.subtle.generateKey(EC, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const oldCert = await issue(
    ca,
    oldKeys.publicKey,
    'CN=system:node:n1, O=system:nodes',
    new Date(Date.now() - 100_000),
    new Date(Date.now() + 1000),
  );
  await writeFile(pemPath, oldCert, { mode: 0o600 });

  const { clients, created } = fakeCertificatesApi(ca);
  const rotator = new ClientCertRotator(clients, { nodeName: 'n1', pemPath }, pino({ level: 'silent' }));
  t.teardown(() => rotator.stop());
  await rotator.start();

  const deadline = Date.now() + 10_000;
  let pem = oldCert;
  while (pem === oldCert && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    pem = await readFile(pemPath, 'utf8');
  }
  const [certPem] = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/) ?? [''];
  const cert = new x509.X509Certificate(certPem);
  // The key in the file must be the one the new certificate certifies.
  const keyPem = /-----BEGIN PRIVATE KEY-----[\s\S]+?-----END PRIVATE KEY-----/.exec(pem)?.[0] ?? '';
  const key = await webcrypto.subtle.importKey('pkcs8', x509.PemConverter.decode(keyPem)[0]!, EC, false, ['sign']);
  const data = Buffer.from('proof');
  const matches = await webcrypto.subtle.verify(
    SIGN,
    await cert.publicKey.export(EC, ['verify']),
    await webcrypto.subtle.sign(SIGN, key, data),
    data,
  );
  t.same(
    {
      csrs: created.map((c) => ({ signerName: c.spec.signerName, usages: c.spec.usages })),
      subject: cert.subject,
      chains: signedBy(certPem, ca.pem),
      keyMatchesCert: matches,
      mode: (await stat(pemPath)).mode & 0o777,
    },
    {
      csrs: [{ signerName: KUBELET_CLIENT_SIGNER, usages: ['digital signature', 'client auth'] }],
      subject: 'CN=system:node:n1, O=system:nodes',
      chains: true,
      keyMatchesCert: true,
      mode: 0o600,
    },
    'one CSR for the node identity; the file holds the new certificate and its key, private',
  );
});

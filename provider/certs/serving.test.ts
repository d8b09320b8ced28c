// The serving certificate manager against a fake certificates API: a joined
// node's request that is denied (or never approved) is made again until one
// is issued, and stop() ends the waiting.
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import t from 'tap';
import { pino } from 'pino';
import { signedBy } from './csr.js';
import { SIGN, fakeCertificatesApi, newCa, type TestCa } from '../../test/helpers/fake-ca.js';
import { ServingCertManager } from './serving.js';

const quiet = pino({ level: 'silent' });

const options = (dir: string) => ({ nodeName: 'n1', ipAddresses: ['192.0.2.7'], dnsNames: ['n1'], dir, approve: false });

t.test('denied requests are made again until one is issued; the pair is stored for the next start', async (t) => {
  const ca = await newCa();
  const { clients, created } = fakeCertificatesApi(ca, 2);
  const dir = join(t.testdir(), 'pki');
  const certs = new ServingCertManager(clients, options(dir), quiet);
  t.teardown(() => certs.stop());
  const pair = await certs.obtain({ initialMs: 10, maxMs: 20 });
  t.same(
    {
      requests: created.length,
      chains: signedBy(pair.certPem, ca.pem),
      keyMode: (await stat(join(dir, 'kubelet-serving.key'))).mode & 0o777,
      dirMode: (await stat(dir)).mode & 0o777,
    },
    { requests: 3, chains: true, keyMode: 0o600, dirMode: 0o700 },
    'two denials, then a third request issued by the CA; key 0600 in a 0700 directory',
  );
  const again = new ServingCertManager(fakeCertificatesApi(ca, 0).clients, options(dir), quiet);
  t.same(await again.ensure(), pair, 'a restarted agent reuses the stored pair without a request');
});

t.test('stop() ends obtain() between attempts', async (t) => {
  const { clients, created } = fakeCertificatesApi(await newCa(), Infinity);
  const certs = new ServingCertManager(clients, options(join(t.testdir(), 'pki')), quiet);
  const obtaining = certs.obtain({ initialMs: 60_000, maxMs: 60_000 });
  while (created.length === 0) await new Promise((r) => setTimeout(r, 10));
  await new Promise((r) => setTimeout(r, 50));
  certs.stop();
  await t.rejects(obtaining, /stopped before a serving certificate was issued/, 'rejects at once, not after the minute');
  t.equal(created.length, 1, 'no request after stop()');
});

t.test('a serving certificate is renewed before it expires and handed to the server', async (t) => {
  const ca = await newCa();
  const { clients, created } = fakeCertificatesApi(ca, 0);
  const certs = new ServingCertManager(clients, options(join(t.testdir(), 'pki')), quiet);
  t.teardown(() => certs.stop());
  const first = await certs.obtain();
  // A certificate that is due already: renewal runs at once (the timer's floor is 1 s).
  const due = { ...first, certPem: await reissue(ca, first.certPem, -2000) };
  const rotated = await new Promise<{ certPem: string }>((resolve) => certs.scheduleRenewal(due, resolve));
  t.same(
    { requests: created.length, changed: rotated.certPem !== due.certPem, chains: signedBy(rotated.certPem, ca.pem) },
    { requests: 2, changed: true, chains: true },
    'a second CSR, and the server gets its new pair',
  );
});

/** The same certificate (subject, key, SANs) with a lifetime ending `endsInMs` from now. */
async function reissue(ca: TestCa, certPem: string, endsInMs: number): Promise<string> {
  const old = new x509.X509Certificate(certPem);
  const cert = await x509.X509CertificateGenerator.create({
    subject: old.subject,
    issuer: 'CN=test-ca',
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + endsInMs),
    publicKey: old.publicKey,
    signingKey: ca.keys.privateKey,
    signingAlgorithm: SIGN,
    extensions: old.extensions.filter((e) => e.type === '2.5.29.17'),
  });
  return cert.toString('pem');
}

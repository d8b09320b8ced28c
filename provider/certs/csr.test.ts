import t from 'tap';
import { createPublicKey } from 'node:crypto';
// csr.js first: it loads the reflect polyfill @peculiar/x509 needs.
import { createKeyAndCsr, renewalTime } from './csr.js';
import * as x509 from '@peculiar/x509';

t.test('CSR carries the node subject and SANs, signed by the generated key', async (t) => {
  const { keyPem, csrPem } = await createKeyAndCsr({
    commonName: 'system:node:n1',
    organizations: ['system:nodes'],
    dnsNames: ['n1'],
    ipAddresses: ['192.0.2.2'],
  });
  const csr = new x509.Pkcs10CertificateRequest(csrPem);
  const sanExt = csr.extensions.find((e) => e.type === '2.5.29.17');
  const san = sanExt && new x509.SubjectAlternativeNameExtension(sanExt.rawData);
  t.match(
    { subject: csr.subject, sans: san?.names.toJSON(), valid: await csr.verify() },
    {
      subject: 'CN=system:node:n1, O=system:nodes',
      sans: [
        { type: 'dns', value: 'n1' },
        { type: 'ip', value: '192.0.2.2' },
      ],
      valid: true,
    },
  );
  t.ok(createPublicKey(keyPem), 'private key is PEM that Node can load');
});

t.test('renewal falls in 70–90% of the lifetime', async (t) => {
  const facts = { notBefore: new Date(0), notAfter: new Date(1000), dnsNames: [], ipAddresses: [] };
  t.equal(renewalTime(facts, () => 0).getTime(), 700);
  t.ok(Math.abs(renewalTime(facts, () => 1).getTime() - 900) <= 1, 'latest renewal at 90%');
});

import t from 'tap';
import { selfSigned } from '../../test/helpers/self-signed.js';
import { isNodeCertificate } from './relay-credentials.js';

/** A self-signed certificate with `subject`, valid for `days`, its key after it (one PEM, as the node's file). */
function cert(subject: string, days: number): string {
  const { certPem, keyPem } = selfSigned(subject, days);
  return certPem + keyPem;
}

t.test("only the node's own client certificate, valid for a while yet, dials the relay", async (t) => {
  const node = cert('/O=system:nodes/CN=system:node:n1', 30);
  t.same(
    [
      isNodeCertificate(node, 'n1'),
      isNodeCertificate(node, 'n2'),
      isNodeCertificate(cert('/O=system:masters/CN=kubernetes-admin', 30), 'n1'),
      isNodeCertificate(node, 'n1', Date.now() + 30 * 86_400_000),
      isNodeCertificate('', 'n1'),
    ],
    [true, false, false, false, false],
    "the node's, not another node's, not an admin's, not one about to expire, not garbage",
  );
});

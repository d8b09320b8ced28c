import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { isNodeCertificate } from './relay-credentials.js';

/** A self-signed certificate with `subject`, valid for `days`. */
function cert(subject: string, days: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'vkvm-relay-cred-'));
  try {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        join(dir, 'k'),
        '-out',
        join(dir, 'c'),
        '-days',
        String(days),
        '-subj',
        subject,
      ],
      { stdio: 'ignore' },
    );
    return readFileSync(join(dir, 'c'), 'utf8') + readFileSync(join(dir, 'k'), 'utf8');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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

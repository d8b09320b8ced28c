import t from 'tap';
import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import { createKeyAndCsr, type CsrSubject } from './csr.js';
import { decideServingCsr } from './serving-approver.js';

const node: V1Node = {
  metadata: { name: 'n1' },
  status: { addresses: [{ type: 'InternalIP', address: '192.0.2.7' }, { type: 'Hostname', address: 'host-1' }] },
};

async function csr(over: { subject?: Partial<CsrSubject>; username?: string; groups?: string[]; usages?: string[] } = {}): Promise<V1CertificateSigningRequest> {
  const subject: CsrSubject = { commonName: 'system:node:n1', organizations: ['system:nodes'], dnsNames: ['host-1', 'n1'], ipAddresses: ['192.0.2.7'], ...over.subject };
  const { csrPem } = await createKeyAndCsr(subject);
  return {
    metadata: { name: 'c' },
    spec: {
      request: Buffer.from(csrPem).toString('base64'),
      signerName: 'kubernetes.io/kubelet-serving',
      username: over.username ?? 'system:node:n1',
      groups: over.groups ?? ['system:nodes', 'system:authenticated'],
      usages: over.usages ?? ['digital signature', 'server auth'],
    },
  };
}

t.test('a node asking for its own names and addresses is approved', async (t) => {
  t.match(decideServingCsr(await csr(), node), { decision: 'approve' });
});

t.test('everything else is denied with a reason that names the problem', async (t) => {
  const cases: Array<[string, Promise<V1CertificateSigningRequest>, V1Node | undefined, string, RegExp]> = [
    ['not a node', csr({ username: 'system:serviceaccount:default:x', groups: ['system:serviceaccounts'] }), node, 'RequesterNotANode', /system:serviceaccount:default:x/],
    ['node user without the group', csr({ groups: ['system:authenticated'] }), node, 'RequesterNotANode', /system:nodes/],
    ['another node\'s CN', csr({ subject: { commonName: 'system:node:n2' } }), node, 'SubjectMismatch', /system:node:n2/],
    ['wrong organization', csr({ subject: { organizations: ['system:masters'] } }), node, 'SubjectMismatch', /system:masters/],
    ['client usage', csr({ usages: ['digital signature', 'server auth', 'client auth'] }), node, 'InvalidUsages', /client auth/],
    ['a SAN the node does not own', csr({ subject: { dnsNames: ['host-1', 'evil.example'] } }), node, 'SANNotOwnedByNode', /dns:evil\.example/],
    ['an IP the node does not own', csr({ subject: { ipAddresses: ['10.9.9.9'] } }), node, 'SANNotOwnedByNode', /ip:10\.9\.9\.9/],
    ['no SANs', csr({ subject: { dnsNames: [], ipAddresses: [] } }), node, 'NoSANs', /no DNS or IP SAN/],
  ];
  for (const [what, c, n, reason, message] of cases) {
    t.match(decideServingCsr(await c, n), { decision: 'deny', reason, message }, what);
  }
});

t.test('a cluster admin\'s request is left to the admin (vkvm up approves its own)', async (t) => {
  t.match(decideServingCsr(await csr({ username: 'kubernetes-admin', groups: ['system:masters', 'system:authenticated'] }), node), { decision: 'ignore' });
});

t.test('a request from a node not registered (or without addresses) yet is retried, not denied', async (t) => {
  t.match(decideServingCsr(await csr(), undefined), { decision: 'retry', message: /does not exist yet/ });
  t.match(decideServingCsr(await csr(), { metadata: { name: 'n1' }, status: {} }), { decision: 'retry', message: /no addresses yet/ });
});

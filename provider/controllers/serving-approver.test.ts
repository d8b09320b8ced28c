import t from 'tap';
import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import { createKeyAndCsr, type CsrSubject } from '../certs/csr.js';
import { decideServingCsr, type ClusterClaims } from './serving-approver.js';

const node: V1Node = {
  metadata: { name: 'n1' },
  status: { addresses: [{ type: 'InternalIP', address: '192.0.2.7' }, { type: 'Hostname', address: 'host-1' }] },
};

const alone: ClusterClaims = { otherNodes: [], apiServiceIPs: ['10.96.0.1'] };

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
  t.match(decideServingCsr(await csr(), node, alone), { decision: 'approve' });
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
    t.match(decideServingCsr(await c, n, alone), { decision: 'deny', reason, message }, what);
  }
});

t.test('a cluster admin\'s request is left to the admin (vkvm up approves its own)', async (t) => {
  t.match(decideServingCsr(await csr({ username: 'kubernetes-admin', groups: ['system:masters', 'system:authenticated'] }), node, alone), { decision: 'ignore' });
});

t.test('a request from a node not registered (or without addresses) yet is retried, not denied', async (t) => {
  t.match(decideServingCsr(await csr(), undefined, alone), { decision: 'retry', message: /does not exist yet/ });
  t.match(decideServingCsr(await csr(), { metadata: { name: 'n1' }, status: {} }, alone), { decision: 'retry', message: /no addresses yet/ });
});

t.test('names no node may own are denied even when the Node reports them as its own', async (t) => {
  // The node writes its own addresses: here it claims the API service's names and IP, loopback, and another node's.
  const greedy: V1Node = {
    metadata: { name: 'n1' },
    status: {
      addresses: ['kubernetes.default.svc', 'web.prod.svc.cluster.local', 'localhost', 'n2', '10.96.0.1', '127.0.0.1', '192.0.2.8'].map((address) => ({ type: 'Hostname', address })),
    },
  };
  const neighbour: ClusterClaims = {
    ...alone,
    otherNodes: [{ metadata: { name: 'n2' }, status: { addresses: [{ type: 'InternalIP', address: '192.0.2.8' }] } }],
  };
  const cases: Array<[string, Partial<CsrSubject>, RegExp]> = [
    ['the in-cluster API name', { dnsNames: ['kubernetes.default.svc'] }, /dns:kubernetes\.default\.svc \(an in-cluster service name\)/],
    ['a service name under the cluster domain', { dnsNames: ['web.prod.svc.cluster.local'] }, /an in-cluster service name/],
    ['localhost', { dnsNames: ['localhost'] }, /a loopback name/],
    ['the kubernetes Service IP', { dnsNames: [], ipAddresses: ['10.96.0.1'] }, /ip:10\.96\.0\.1 \(the kubernetes Service's cluster IP\)/],
    ['a loopback IP', { dnsNames: [], ipAddresses: ['127.0.0.1'] }, /a loopback address/],
    ["another Node's name", { dnsNames: ['n2'] }, /dns:n2 \(claimed by Node n2\)/],
    ["another Node's address", { dnsNames: [], ipAddresses: ['192.0.2.8'] }, /ip:192\.0\.2\.8 \(claimed by Node n2\)/],
  ];
  for (const [what, subject, message] of cases) {
    t.match(decideServingCsr(await csr({ subject: { dnsNames: [], ipAddresses: [], ...subject } }), greedy, neighbour), { decision: 'deny', reason: 'SANReserved', message }, what);
  }
  t.match(decideServingCsr(await csr(), node, neighbour), { decision: 'approve' }, 'its own names and addresses still pass beside another node');
});

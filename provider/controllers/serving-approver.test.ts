import t from 'tap';
import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import { createKeyAndCsr, type CsrSubject } from '../certs/csr.js';
import { decideServingCsr, type ClusterClaims } from './serving-approver.js';
import { sanKey } from './apiserver-names.js';
import type { ServingCsrPolicy } from './serving-policy.js';

const node: V1Node = {
  metadata: { name: 'n1' },
  status: {
    addresses: [
      { type: 'InternalIP', address: '192.0.2.7' },
      { type: 'Hostname', address: 'host-1' },
    ],
  },
};

const alone: ClusterClaims = { otherNodes: [], apiServiceIPs: ['10.96.0.1'], apiServer: new Map() };
/** The operator's policy: n1's network, and its hostname by pattern. */
const policy: ServingCsrPolicy = { nodeIpRanges: ['192.0.2.0/24'], dnsPattern: 'host-\\d+' };

async function csr(
  over: { subject?: Partial<CsrSubject>; username?: string; groups?: string[]; usages?: string[] } = {},
): Promise<V1CertificateSigningRequest> {
  const subject: CsrSubject = {
    commonName: 'system:node:n1',
    organizations: ['system:nodes'],
    dnsNames: ['host-1', 'n1'],
    ipAddresses: ['192.0.2.7'],
    ...over.subject,
  };
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
  t.match(decideServingCsr(await csr(), node, alone, policy), { decision: 'approve' });
});

t.test('everything else is denied with a reason that names the problem', async (t) => {
  const cases: Array<[string, Promise<V1CertificateSigningRequest>, V1Node | undefined, string, RegExp]> = [
    [
      'not a node',
      csr({ username: 'system:serviceaccount:default:x', groups: ['system:serviceaccounts'] }),
      node,
      'RequesterNotANode',
      /system:serviceaccount:default:x/,
    ],
    ['node user without the group', csr({ groups: ['system:authenticated'] }), node, 'RequesterNotANode', /system:nodes/],
    ["another node's CN", csr({ subject: { commonName: 'system:node:n2' } }), node, 'SubjectMismatch', /system:node:n2/],
    ['wrong organization', csr({ subject: { organizations: ['system:masters'] } }), node, 'SubjectMismatch', /system:masters/],
    ['client usage', csr({ usages: ['digital signature', 'server auth', 'client auth'] }), node, 'InvalidUsages', /client auth/],
    [
      'a name the pattern allows but the node does not report',
      csr({ subject: { dnsNames: ['host-1', 'host-9'] } }),
      node,
      'SANNotOwnedByNode',
      /dns:host-9/,
    ],
    [
      'an IP in range the node does not report',
      csr({ subject: { ipAddresses: ['192.0.2.99'] } }),
      node,
      'SANNotOwnedByNode',
      /ip:192\.0\.2\.99/,
    ],
    ['no SANs', csr({ subject: { dnsNames: [], ipAddresses: [] } }), node, 'NoSANs', /no DNS or IP SAN/],
  ];
  for (const [what, c, n, reason, message] of cases) {
    t.match(decideServingCsr(await c, n, alone, policy), { decision: 'deny', reason, message }, what);
  }
});

t.test("a cluster admin's request is left to the admin (vkvm up approves its own)", async (t) => {
  t.match(
    decideServingCsr(await csr({ username: 'kubernetes-admin', groups: ['system:masters', 'system:authenticated'] }), node, alone, policy),
    { decision: 'ignore' },
  );
});

t.test('a request from a node not registered (or without addresses) yet is retried, not denied', async (t) => {
  t.match(decideServingCsr(await csr(), undefined, alone, policy), { decision: 'retry', message: /does not exist yet/ });
  t.match(decideServingCsr(await csr(), { metadata: { name: 'n1' }, status: {} }, alone, policy), {
    decision: 'retry',
    message: /no addresses yet/,
  });
});

t.test('names no node may own are denied even when the Node reports them as its own', async (t) => {
  // The node writes its own addresses: here it claims the API service's names and IP, loopback, and another node's.
  const greedy: V1Node = {
    metadata: { name: 'n1' },
    status: {
      addresses: ['kubernetes.default.svc', 'web.prod.svc.cluster.local', 'localhost', 'n2', '10.96.0.1', '127.0.0.1', '192.0.2.8'].map(
        (address) => ({ type: 'Hostname', address }),
      ),
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
    t.match(
      decideServingCsr(await csr({ subject: { dnsNames: [], ipAddresses: [], ...subject } }), greedy, neighbour, policy),
      { decision: 'deny', reason: 'SANReserved', message },
      what,
    );
  }
  t.match(
    decideServingCsr(await csr(), node, neighbour, policy),
    { decision: 'approve' },
    'its own names and addresses still pass beside another node',
  );
});

t.test("the API server's names and addresses are denied whatever the Node reports, with where they were seen", async (t) => {
  const claims: ClusterClaims = {
    ...alone,
    apiServer: new Map([
      [sanKey('192.0.2.1'), ['kubernetes EndpointSlice', 'kubeconfig server']],
      [sanKey('API.example.com.'), ['serving certificate']],
      [sanKey('2001:db8::1'), ['serving certificate']],
    ]),
  };
  const greedy: V1Node = {
    metadata: { name: 'n1' },
    status: { addresses: ['192.0.2.1', 'api.example.com', '2001:db8::1'].map((address) => ({ type: 'ExternalIP', address })) },
  };
  const wide: ServingCsrPolicy = { nodeIpRanges: ['192.0.2.0/24', '2001:db8::/32'], dnsPattern: '.*' };
  const cases: Array<[string, Partial<CsrSubject>, RegExp]> = [
    [
      'its advertised address, inside the node ranges',
      { ipAddresses: ['192.0.2.1'] },
      /ip:192\.0\.2\.1 \(the API server's address: kubernetes EndpointSlice, kubeconfig server\)/,
    ],
    [
      'a name of its certificate, in another case',
      { dnsNames: ['api.EXAMPLE.com'] },
      /dns:api\.EXAMPLE\.com \(the API server's name: serving certificate\)/,
    ],
    ['an IPv6 address written out in full', { ipAddresses: ['2001:db8:0:0:0:0:0:1'] }, /\(the API server's address: serving certificate\)/],
  ];
  for (const [what, subject, message] of cases) {
    t.match(
      decideServingCsr(await csr({ subject: { dnsNames: [], ipAddresses: [], ...subject } }), greedy, claims, wide),
      { decision: 'deny', reason: 'SANReserved', message },
      what,
    );
  }
});

t.test('IP SANs must fall in the configured node ranges', async (t) => {
  const moved: V1Node = { metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '198.51.100.7' }] } };
  t.match(
    decideServingCsr(await csr({ subject: { dnsNames: [], ipAddresses: ['198.51.100.7'] } }), moved, alone, policy),
    { decision: 'deny', reason: 'IPOutsideNodeRanges', message: 'ip:198.51.100.7: outside the node ranges 192.0.2.0/24' },
    'an address the Node reports, outside the ranges',
  );
  t.match(
    decideServingCsr(await csr(), node, alone, { nodeIpRanges: [] }),
    { decision: 'deny', reason: 'IPOutsideNodeRanges', message: /outside any node range: none is configured \(--node-ip-ranges\)/ },
    'with no ranges configured, no IP SAN is approved',
  );
  const v6: V1Node = { metadata: { name: 'n1' }, status: { addresses: [{ type: 'InternalIP', address: '2001:db8::7' }] } };
  t.match(
    decideServingCsr(await csr({ subject: { dnsNames: [], ipAddresses: ['2001:db8::7'] } }), v6, alone, {
      nodeIpRanges: ['192.0.2.0/24', '2001:db8::/64'],
    }),
    { decision: 'approve' },
    'IPv6 in an IPv6 range',
  );
});

t.test('DNS SANs must be the node name or match the pattern entirely', async (t) => {
  const named: V1Node = {
    metadata: { name: 'n1' },
    status: {
      addresses: [
        { type: 'InternalIP', address: '192.0.2.7' },
        { type: 'Hostname', address: 'evil-host-1.example' },
      ],
    },
  };
  t.match(
    decideServingCsr(await csr({ subject: { dnsNames: ['n1'] } }), node, alone, { nodeIpRanges: ['192.0.2.0/24'] }),
    { decision: 'approve' },
    'the node name needs no pattern',
  );
  t.match(
    decideServingCsr(await csr(), node, alone, { nodeIpRanges: ['192.0.2.0/24'] }),
    { decision: 'deny', reason: 'DNSNameNotAllowed', message: 'dns:host-1: not the node name n1, and no --node-dns-pattern is configured' },
    'without a pattern, the hostname the Node reports is not enough',
  );
  t.match(
    decideServingCsr(await csr({ subject: { dnsNames: ['evil-host-1.example'] } }), named, alone, policy),
    {
      decision: 'deny',
      reason: 'DNSNameNotAllowed',
      message: 'dns:evil-host-1.example: neither the node name n1 nor a match of host-\\d+',
    },
    'the pattern matches whole names, not a part of one',
  );
  const upper: V1Node = {
    metadata: { name: 'n1' },
    status: {
      addresses: [
        { type: 'InternalIP', address: '192.0.2.7' },
        { type: 'Hostname', address: 'HOST-2' },
      ],
    },
  };
  t.match(
    decideServingCsr(await csr({ subject: { dnsNames: ['HOST-2'] } }), upper, alone, policy),
    { decision: 'approve' },
    'DNS names match regardless of case',
  );
});

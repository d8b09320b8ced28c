// Approves kubelet-serving CSRs, which kube-controller-manager signs but
// never approves. Run by the cluster-wide vkvm controllers (leader-elected).
// A request is approved only when a node asks for itself: requester
// system:node:<name> in group system:nodes, subject exactly that node, server
// usages only, and every DNS/IP SAN one of the Node's addresses or its name.
// Anything else is denied with the reason; a request from a node whose Node
// object (or address) is not there yet is retried, not denied. Requests of
// cluster admins (system:masters) are left alone: they may approve their own,
// as `vkvm up`'s agent does with admin credentials.
//
// A node writes its own name and addresses (NodeRestriction does not check
// them), so "the Node's addresses" alone would let any bootstrap-token holder
// obtain a cluster-CA certificate for any name. The approver therefore also
// denies names no node may own: in-cluster service names (kubernetes.default,
// *.svc, *.svc.<domain>), localhost, the kubernetes Service's cluster IPs,
// the API server's own names and addresses (apiserver-names.ts),
// loopback/unspecified/multicast IPs, and any name or address another Node
// already reports (first come, first served, as addresses on a network are);
// and it approves only what the operator allows (serving-policy.ts): IP SANs
// inside the configured node ranges, DNS SANs that are the node's name or
// match the configured pattern.
import { isIP } from 'node:net';
import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import ipaddr from 'ipaddr.js';
// @peculiar/x509 needs reflect-metadata loaded first, and csr.ts sets its crypto provider.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import { ClusterInformer } from '../kube/informer.js';
import type { Logger } from '../log.js';
import { KeyQueue } from '../kube/key-queue.js';
import '../certs/csr.js';
import { KUBELET_SERVING_SIGNER } from '../certs/serving.js';
import { apiServerNames, sanKey, type ApiServerNames } from './apiserver-names.js';
import { dnsPatternRegExp, ipInRanges, type ServingCsrPolicy } from './serving-policy.js';

const ALLOWED_USAGES = new Set(['digital signature', 'key encipherment', 'server auth']);
const NODE_USER = /^system:node:(.+)$/;
const SUBJECT_ALT_NAME_OID = '2.5.29.17';

export type ServingCsrDecision =
  | { decision: 'approve'; message: string }
  | { decision: 'deny'; reason: string; message: string }
  /** Not decidable yet (the Node or its addresses are missing): retry. */
  | { decision: 'retry'; message: string }
  /** Not ours to decide (a cluster admin's request). */
  | { decision: 'ignore'; message: string };

export function isDecided(csr: V1CertificateSigningRequest): boolean {
  return csr.status?.conditions?.some((c) => c.type === 'Approved' || c.type === 'Denied' || c.type === 'Failed') ?? false;
}

/** The node name a CSR's requester claims to be, if it is a node at all. */
export function requestingNode(csr: V1CertificateSigningRequest): string | undefined {
  const m = NODE_USER.exec(csr.spec.username ?? '');
  return m?.[1] && csr.spec.groups?.includes('system:nodes') ? m[1] : undefined;
}

const deny = (reason: string, message: string): ServingCsrDecision => ({ decision: 'deny', reason, message });

/** What the rest of the cluster already holds: names and addresses no requesting node may claim. */
export interface ClusterClaims {
  /** Every Node but the requester's: their names and reported addresses are theirs. */
  otherNodes: readonly V1Node[];
  /** The default/kubernetes Service's cluster IPs (the in-cluster API address). */
  apiServiceIPs: readonly string[];
  /** What the API server answers to, with where each was seen. */
  apiServer: ApiServerNames;
}

/** Service DNS names: kubernetes, kubernetes.default, anything.svc and anything.svc.<cluster domain>. */
const SERVICE_NAME = /^(kubernetes(\.default)?|.+\.svc(\..+)?)\.?$/i;

/** Why no node may hold this SAN whatever its Node says, or undefined. */
function reservedSan(name: { type: string; value: string }, claims: ClusterClaims): string | undefined {
  if (name.type === 'dns') {
    if (SERVICE_NAME.test(name.value)) return 'an in-cluster service name';
    if (/^localhost\.?$/i.test(name.value) || /\.localhost\.?$/i.test(name.value)) return 'a loopback name';
  } else {
    if (!isIP(name.value)) return 'not an IP address';
    if (claims.apiServiceIPs.some((ip) => sanKey(ip) === sanKey(name.value))) return "the kubernetes Service's cluster IP";
    const range = ipaddr.process(name.value).range();
    if (range === 'loopback' || range === 'unspecified' || range === 'multicast' || range === 'broadcast') return `a ${range} address`;
  }
  const seen = claims.apiServer.get(sanKey(name.value));
  if (seen) return `the API server's ${name.type === 'ip' ? 'address' : 'name'}: ${seen.join(', ')}`;
  const owner = claims.otherNodes.find(
    (n) => n.metadata?.name === name.value || n.status?.addresses?.some((a) => a.address === name.value),
  );
  return owner ? `claimed by Node ${owner.metadata?.name}` : undefined;
}

/**
 * Pure decision on one pending kubelet-serving CSR, given the requesting
 * node's Node (undefined: not found), what the API server, other Nodes and
 * Services hold, and what the operator allows.
 */
export function decideServingCsr(
  csr: V1CertificateSigningRequest,
  node: V1Node | undefined,
  claims: ClusterClaims,
  policy: ServingCsrPolicy,
): ServingCsrDecision {
  const user = csr.spec.username ?? '';
  const nodeName = requestingNode(csr);
  if (!nodeName && csr.spec.groups?.includes('system:masters'))
    return { decision: 'ignore', message: `${user} is a cluster admin and may approve it` };
  if (!nodeName) return deny('RequesterNotANode', `requester ${JSON.stringify(user)} is not system:node:<name> in group system:nodes`);
  let req: x509.Pkcs10CertificateRequest;
  try {
    req = new x509.Pkcs10CertificateRequest(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
  } catch (err) {
    return deny('InvalidRequest', `spec.request is not a PEM certificate request: ${(err as Error).message}`);
  }
  const cn = req.subjectName.getField('CN');
  const orgs = req.subjectName.getField('O');
  if (cn.length !== 1 || cn[0] !== user)
    return deny('SubjectMismatch', `subject CN ${JSON.stringify(cn.join(','))} is not the requester ${user}`);
  if (orgs.length !== 1 || orgs[0] !== 'system:nodes')
    return deny('SubjectMismatch', `subject O ${JSON.stringify(orgs.join(','))} is not system:nodes`);
  const usages = csr.spec.usages ?? [];
  const badUsages = usages.filter((u) => !ALLOWED_USAGES.has(u));
  if (!usages.includes('server auth') || badUsages.length) {
    return deny('InvalidUsages', `usages must include "server auth" and only ${[...ALLOWED_USAGES].join(', ')}; got ${usages.join(', ')}`);
  }
  const sanExt = req.extensions.find((e) => e.type === SUBJECT_ALT_NAME_OID);
  const names = sanExt ? new x509.SubjectAlternativeNameExtension(sanExt.rawData).names.items : [];
  const other = names.filter((n) => n.type !== 'dns' && n.type !== 'ip');
  if (other.length)
    return deny('UnexpectedSANs', `only DNS and IP SANs are allowed; got ${other.map((n) => `${n.type}:${n.value}`).join(', ')}`);
  if (!names.length) return deny('NoSANs', 'the request names no DNS or IP SAN');
  const reserved = names.flatMap((n) => {
    const why = reservedSan(n, claims);
    return why ? [`${n.type}:${n.value} (${why})`] : [];
  });
  if (reserved.length) return deny('SANReserved', `no node may hold ${reserved.join(', ')}`);
  const outside = names.filter((n) => n.type === 'ip' && !ipInRanges(n.value, policy.nodeIpRanges)).map((n) => `ip:${n.value}`);
  if (outside.length) {
    const ranges = policy.nodeIpRanges.length
      ? `the node ranges ${policy.nodeIpRanges.join(', ')}`
      : 'any node range: none is configured (--node-ip-ranges)';
    return deny('IPOutsideNodeRanges', `${outside.join(', ')}: outside ${ranges}`);
  }
  const pattern = policy.dnsPattern === undefined ? undefined : dnsPatternRegExp(policy.dnsPattern);
  const foreign = names
    .filter((n) => n.type === 'dns' && sanKey(n.value) !== nodeName && !pattern?.test(n.value))
    .map((n) => `dns:${n.value}`);
  if (foreign.length) {
    const allowed = pattern
      ? `neither the node name ${nodeName} nor a match of ${policy.dnsPattern}`
      : `not the node name ${nodeName}, and no --node-dns-pattern is configured`;
    return deny('DNSNameNotAllowed', `${foreign.join(', ')}: ${allowed}`);
  }
  if (!node) return { decision: 'retry', message: `Node ${nodeName} does not exist yet` };
  const known = new Set([nodeName, ...(node.status?.addresses ?? []).map((a) => a.address)]);
  const unknown = names.filter((n) => !known.has(n.value)).map((n) => `${n.type}:${n.value}`);
  if (unknown.length) {
    // Addresses are posted just before the agent asks; a Node without any is still starting.
    if (!node.status?.addresses?.length) return { decision: 'retry', message: `Node ${nodeName} has no addresses yet` };
    return deny('SANNotOwnedByNode', `SANs ${unknown.join(', ')} are not addresses of Node ${nodeName} (${[...known].join(', ')})`);
  }
  return { decision: 'approve', message: `every SAN is an address of Node ${nodeName}` };
}

export class ServingCsrApprover {
  private readonly informer: ClusterInformer<V1CertificateSigningRequest>;
  private readonly queue: KeyQueue;

  constructor(
    private readonly clients: KubeClients,
    private readonly policy: ServingCsrPolicy,
    private readonly log: Logger,
  ) {
    const fieldSelector = `spec.signerName=${KUBELET_SERVING_SIGNER}`;
    this.informer = new ClusterInformer({
      clients,
      path: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
      list: () => clients.certificates.listCertificateSigningRequest({ fieldSelector }),
      fieldSelector,
      log: log.child({ component: 'csr-informer' }),
    });
    this.queue = new KeyQueue((name) => this.sync(name), { name: 'approveServingCsrs', workers: 1, log });
    this.informer.onChange((csr) => {
      if (csr.metadata?.name && !isDecided(csr)) this.queue.add(csr.metadata.name);
    });
  }

  async start(): Promise<void> {
    await this.informer.start();
  }

  async stop(): Promise<void> {
    this.queue.stop();
    await this.informer.stop();
  }

  private async apiServiceIPs(): Promise<string[]> {
    try {
      const svc = await this.clients.core.readNamespacedService({ name: 'kubernetes', namespace: 'default' });
      return svc.spec?.clusterIPs ?? (svc.spec?.clusterIP ? [svc.spec.clusterIP] : []);
    } catch (err) {
      if (isNotFound(err)) return [];
      throw err;
    }
  }

  /** Reads the CSR fresh (the cache may lag an earlier decision) and decides it; throws to retry. */
  private async sync(name: string): Promise<void> {
    let csr: V1CertificateSigningRequest;
    try {
      csr = await this.clients.certificates.readCertificateSigningRequest({ name });
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    if (isDecided(csr)) return;
    const nodeName = requestingNode(csr);
    // Read fresh, not from a cache: a decision must not rest on a Node list from before another node claimed a name.
    const nodes = nodeName ? (await this.clients.core.listNode()).items : [];
    const claims: ClusterClaims = nodeName
      ? {
          otherNodes: nodes.filter((n) => n.metadata?.name !== nodeName),
          apiServiceIPs: await this.apiServiceIPs(),
          apiServer: await apiServerNames(this.clients, this.log),
        }
      : { otherNodes: [], apiServiceIPs: [], apiServer: new Map() };
    const d = decideServingCsr(
      csr,
      nodes.find((n) => n.metadata?.name === nodeName),
      claims,
      this.policy,
    );
    if (d.decision === 'retry') throw new Error(`CSR ${name}: ${d.message}`);
    if (d.decision === 'ignore') return;
    const now = new Date();
    const condition =
      d.decision === 'approve'
        ? {
            type: 'Approved',
            status: 'True',
            reason: 'VkvmNodeServingCertApproved',
            message: d.message,
            lastUpdateTime: now,
            lastTransitionTime: now,
          }
        : { type: 'Denied', status: 'True', reason: d.reason, message: d.message, lastUpdateTime: now, lastTransitionTime: now };
    csr.status = { ...csr.status, conditions: [...(csr.status?.conditions ?? []), condition] };
    await this.clients.certificates.replaceCertificateSigningRequestApproval({ name, body: csr });
    const log = this.log.child({ csr: name, requester: csr.spec.username });
    if (d.decision === 'approve') log.info('approved kubelet-serving CSR');
    else log.warn({ reason: d.reason, message: d.message }, 'denied kubelet-serving CSR');
  }
}

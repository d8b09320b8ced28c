// Approves kubelet-serving CSRs, which kube-controller-manager signs but
// never approves. Run by the cluster-wide vkvm controllers (leader-elected).
// A request is approved only when a node asks for itself: requester
// system:node:<name> in group system:nodes, subject exactly that node, server
// usages only, and every DNS/IP SAN one of the Node's addresses or its name.
// Anything else is denied with the reason; a request from a node whose Node
// object (or address) is not there yet is retried, not denied. Requests of
// cluster admins (system:masters) are left alone: they may approve their own,
// as `vkvm up`'s agent does with admin credentials.
import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
// @peculiar/x509 needs reflect-metadata loaded first, and csr.ts sets its crypto provider.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import { ClusterInformer } from '../kube/informer.js';
import type { Logger } from '../log.js';
import { KeyQueue } from '../pods/queue.js';
import './csr.js';
import { KUBELET_SERVING_SIGNER } from './serving.js';

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

/** Pure decision on one pending kubelet-serving CSR, given the requesting node's Node (undefined: not found). */
export function decideServingCsr(csr: V1CertificateSigningRequest, node: V1Node | undefined): ServingCsrDecision {
  const user = csr.spec.username ?? '';
  const nodeName = requestingNode(csr);
  if (!nodeName && csr.spec.groups?.includes('system:masters')) return { decision: 'ignore', message: `${user} is a cluster admin and may approve it` };
  if (!nodeName) return deny('RequesterNotANode', `requester ${JSON.stringify(user)} is not system:node:<name> in group system:nodes`);
  let req: x509.Pkcs10CertificateRequest;
  try {
    req = new x509.Pkcs10CertificateRequest(Buffer.from(csr.spec.request, 'base64').toString('utf8'));
  } catch (err) {
    return deny('InvalidRequest', `spec.request is not a PEM certificate request: ${(err as Error).message}`);
  }
  const cn = req.subjectName.getField('CN');
  const orgs = req.subjectName.getField('O');
  if (cn.length !== 1 || cn[0] !== user) return deny('SubjectMismatch', `subject CN ${JSON.stringify(cn.join(','))} is not the requester ${user}`);
  if (orgs.length !== 1 || orgs[0] !== 'system:nodes') return deny('SubjectMismatch', `subject O ${JSON.stringify(orgs.join(','))} is not system:nodes`);
  const usages = csr.spec.usages ?? [];
  const badUsages = usages.filter((u) => !ALLOWED_USAGES.has(u));
  if (!usages.includes('server auth') || badUsages.length) {
    return deny('InvalidUsages', `usages must include "server auth" and only ${[...ALLOWED_USAGES].join(', ')}; got ${usages.join(', ')}`);
  }
  const sanExt = req.extensions.find((e) => e.type === SUBJECT_ALT_NAME_OID);
  const names = sanExt ? new x509.SubjectAlternativeNameExtension(sanExt.rawData).names.items : [];
  const other = names.filter((n) => n.type !== 'dns' && n.type !== 'ip');
  if (other.length) return deny('UnexpectedSANs', `only DNS and IP SANs are allowed; got ${other.map((n) => `${n.type}:${n.value}`).join(', ')}`);
  if (!names.length) return deny('NoSANs', 'the request names no DNS or IP SAN');
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
    let node: V1Node | undefined;
    if (nodeName) {
      try {
        node = await this.clients.core.readNode({ name: nodeName });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
    const d = decideServingCsr(csr, node);
    if (d.decision === 'retry') throw new Error(`CSR ${name}: ${d.message}`);
    if (d.decision === 'ignore') return;
    const now = new Date();
    const condition =
      d.decision === 'approve'
        ? { type: 'Approved', status: 'True', reason: 'VkvmNodeServingCertApproved', message: d.message, lastUpdateTime: now, lastTransitionTime: now }
        : { type: 'Denied', status: 'True', reason: d.reason, message: d.message, lastUpdateTime: now, lastTransitionTime: now };
    csr.status = { ...csr.status, conditions: [...(csr.status?.conditions ?? []), condition] };
    await this.clients.certificates.replaceCertificateSigningRequestApproval({ name, body: csr });
    const log = this.log.child({ csr: name, requester: csr.spec.username });
    if (d.decision === 'approve') log.info('approved kubelet-serving CSR');
    else log.warn({ reason: d.reason, message: d.message }, 'denied kubelet-serving CSR');
  }
}

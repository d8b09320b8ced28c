// Token-based discovery, as `kubeadm join --discovery-token-ca-cert-hash`:
// read kube-public/cluster-info without trusting the server, check that the
// bootstrapsigner signed its kubeconfig with our token (so the server knows
// the token), check that the CA's public key matches a pinned hash, then
// re-read it over TLS verified by that CA.
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { request } from 'node:https';
import { parse } from 'yaml';
// @peculiar/x509 needs reflect-metadata loaded first, and csr.ts sets its crypto provider.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import '../certs/csr.js';
import { ConfigError } from '../config.js';
import type { BootstrapToken } from './bootstrap-token.js';
import { JoinError } from './errors.js';

export class DiscoveryError extends JoinError {
  override readonly kind = 'DiscoveryError';
}

export const CLUSTER_INFO = { namespace: 'kube-public', name: 'cluster-info' } as const;

/** `sha256:<hex>` over the DER SubjectPublicKeyInfo of a CA certificate, as kubeadm pins it. */
export function caCertHash(caPem: string): string {
  const spki = new x509.X509Certificate(caPem).publicKey.rawData;
  return `sha256:${createHash('sha256').update(Buffer.from(spki)).digest('hex')}`;
}

export function parseCaCertHash(raw: string, field = '--discovery-token-ca-cert-hash'): string {
  const m = /^sha256:([0-9a-fA-F]{64})$/.exec(raw);
  if (!m?.[1]) throw new ConfigError(field, `want sha256:<64 hex digits> (kubeadm's format), got ${JSON.stringify(raw)}`);
  return `sha256:${m[1].toLowerCase()}`;
}

const b64url = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

/** Checks a detached JWS (header..signature), as kubeadm's bootstrapsigner stores it in cluster-info as jws-kubeconfig-<token id>. */
export function verifyDetached(content: string, jws: string, token: BootstrapToken): boolean {
  const parts = jws.split('.');
  if (parts.length !== 3 || parts[1] !== '' || !parts[0] || !parts[2]) return false;
  let header: { alg?: string; kid?: string };
  try {
    header = JSON.parse(Buffer.from(parts[0], 'base64url').toString('utf8')) as typeof header;
  } catch {
    return false;
  }
  if (header.alg !== 'HS256' || (header.kid !== undefined && header.kid !== token.id)) return false;
  const want = createHmac('sha256', token.secret)
    .update(`${parts[0]}.${b64url(content)}`)
    .digest();
  const got = Buffer.from(parts[2], 'base64url');
  return got.length === want.length && timingSafeEqual(got, want);
}

/** The CA bundle carried by cluster-info's kubeconfig (its first cluster). */
export function caFromClusterInfoKubeconfig(kubeconfig: string): string {
  // Parsed as YAML: kubeadm names the cluster "", which client-node's KubeConfig rejects.
  let parsed: { clusters?: Array<{ cluster?: { 'certificate-authority-data'?: string } }> } | undefined;
  try {
    parsed = parse(kubeconfig) as typeof parsed;
  } catch (err) {
    throw new DiscoveryError('cluster-info holds no valid kubeconfig', { cause: err });
  }
  const caData = parsed?.clusters?.[0]?.cluster?.['certificate-authority-data'];
  if (!caData) throw new DiscoveryError('cluster-info has no certificate-authority-data');
  return Buffer.from(caData, 'base64').toString('utf8');
}

/** The PEM certificates of a bundle. */
export function splitPem(bundle: string): string[] {
  return bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
}

/**
 * Pure check of one cluster-info ConfigMap's data: the token's signature,
 * then the CA pin. Returns the CA bundle to trust.
 */
export function verifyClusterInfo(data: Record<string, string>, token: BootstrapToken, caHashes: string[]): string {
  const kubeconfig = data.kubeconfig;
  if (!kubeconfig) throw new DiscoveryError('cluster-info has no kubeconfig');
  const jws = data[`jws-kubeconfig-${token.id}`];
  if (!jws) {
    throw new DiscoveryError(
      `the cluster does not know bootstrap token id ${JSON.stringify(token.id)} (no signature jws-kubeconfig-${token.id} in kube-public/cluster-info): it is unknown or expired; create one with "vkvm token create"`,
    );
  }
  if (!verifyDetached(kubeconfig, jws, token)) {
    throw new DiscoveryError(`the signature of cluster-info does not match --token: the token secret is wrong`);
  }
  const bundle = caFromClusterInfoKubeconfig(kubeconfig);
  const certs = splitPem(bundle);
  const found = certs.map(caCertHash);
  if (!found.some((h) => caHashes.includes(h))) {
    throw new DiscoveryError(
      `the cluster CA does not match --discovery-token-ca-cert-hash: the server's CA has ${found.join(', ') || 'no certificate'}; check the hash (vkvm token create prints it) or you are talking to another cluster`,
    );
  }
  return bundle;
}

async function fetchClusterInfo(server: string, ca: string | undefined): Promise<Record<string, string>> {
  const url = `${server.replace(/\/$/, '')}/api/v1/namespaces/${CLUSTER_INFO.namespace}/configmaps/${CLUSTER_INFO.name}`;
  return new Promise((resolve, reject) => {
    // Without a CA the server is not trusted yet: what it sends is checked by signature and pin.
    const req = request(url, { ca, rejectUnauthorized: ca !== undefined, timeout: 15_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        if (res.statusCode !== 200) {
          reject(
            new DiscoveryError(
              `reading ${CLUSTER_INFO.namespace}/${CLUSTER_INFO.name} from ${server}: HTTP ${res.statusCode}${res.statusCode === 403 || res.statusCode === 404 ? ' (run "vkvm token create" on the cluster to publish it)' : ''}`,
            ),
          );
          return;
        }
        try {
          resolve((JSON.parse(body) as { data?: Record<string, string> }).data ?? {});
        } catch (err) {
          reject(new DiscoveryError(`cluster-info from ${server} is not JSON`, { cause: err }));
        }
      });
    });
    req.on('timeout', () => req.destroy(new DiscoveryError(`no answer from ${server} within 15 s`)));
    req.on('error', (err) =>
      reject(err instanceof DiscoveryError ? err : new DiscoveryError(`cannot reach ${server}: ${err.message}`, { cause: err })),
    );
    req.end();
  });
}

/** Discovers and verifies the cluster CA; the second read proves the server holds that CA's serving certificate. */
export async function discoverClusterCa(server: string, token: BootstrapToken, caHashes: string[]): Promise<string> {
  const ca = verifyClusterInfo(await fetchClusterInfo(server, undefined), token, caHashes);
  const again = await fetchClusterInfo(server, ca);
  if (again.kubeconfig === undefined || caFromClusterInfoKubeconfig(again.kubeconfig) !== ca) {
    throw new DiscoveryError('cluster-info changed between the unverified and the verified read; retry');
  }
  return ca;
}

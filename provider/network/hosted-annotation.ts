// The two annotations a vkvm node publishes on its own Node for migrated VMs'
// addresses (moved-routes.ts, moved-agreement.ts), and how a peer's are read.
// A node's claim (hosted) routes nothing on its own: the address's home node
// must lend it to that node too (lent).
/** The Node annotation: addresses of other nodes' ranges whose VMs run on this node, each with when it took it. */
export const HOSTED_POD_IPS_ANNOTATION = 'vkvm.io/hosted-pod-ips';
/** The Node annotation: addresses of this node's own range whose VMs run elsewhere, each with the node it lends it to. */
export const LENT_POD_IPS_ANNOTATION = 'vkvm.io/lent-pod-ips';

/** address → when the node took it (ISO time). */
export type HostedPodIps = Record<string, string>;

/** address (of the publishing node's range) → the node it is lent to. */
export type LentPodIps = Record<string, string>;

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
/** A Node name: a DNS-1123 subdomain. */
const NODE_NAME = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Sorted JSON, or null for none (a merge patch's removal). */
function render(entries: Record<string, string>): string | null {
  const ips = Object.keys(entries).sort();
  return ips.length ? JSON.stringify(Object.fromEntries(ips.map((ip) => [ip, entries[ip]]))) : null;
}

/** The well-formed entries of a peer's annotation: another node's junk must not break routing. */
function parse(value: string | undefined, valid: (v: unknown) => boolean): Record<string, string> {
  if (!value) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return {};
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return {};
  return Object.fromEntries(Object.entries(parsed).filter(([ip, v]) => IPV4.test(ip) && valid(v))) as Record<string, string>;
}

/** The hosted annotation's value (JSON, sorted), or null for none. Pure. */
export const renderHostedPodIps = (hosted: HostedPodIps): string | null => render(hosted);

/** A peer's hosted annotation, keeping only entries of an IPv4 address and a time. Pure. */
export const parseHostedPodIps = (value: string | undefined): HostedPodIps =>
  parse(value, (at) => typeof at === 'string' && !Number.isNaN(Date.parse(at)));

/** The lent annotation's value (JSON, sorted), or null for none. Pure. */
export const renderLentPodIps = (lent: LentPodIps): string | null => render(lent);

/** A peer's lent annotation, keeping only entries of an IPv4 address and a Node name. Pure. */
export const parseLentPodIps = (value: string | undefined): LentPodIps =>
  parse(value, (node) => typeof node === 'string' && NODE_NAME.test(node));

// The annotation a vkvm node publishes on its Node for the migrated VMs'
// addresses it hosts (moved-routes.ts), and how a peer's is read.
/** The Node annotation: addresses of other nodes' ranges whose VMs run on this node, each with when it took it. */
export const HOSTED_POD_IPS_ANNOTATION = 'vkvm.io/hosted-pod-ips';

/** address → when the node took it (ISO time): the latest taker is where it lives now. */
export type HostedPodIps = Record<string, string>;

const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

/** The annotation's value (JSON, sorted), or null for none (a merge patch's removal). Pure. */
export function renderHostedPodIps(hosted: HostedPodIps): string | null {
  const ips = Object.keys(hosted).sort();
  return ips.length ? JSON.stringify(Object.fromEntries(ips.map((ip) => [ip, hosted[ip]]))) : null;
}

/** A peer's annotation, keeping only well-formed entries: another node's junk must not break routing. Pure. */
export function parseHostedPodIps(value: string | undefined): HostedPodIps {
  if (!value) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    return {};
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return {};
  return Object.fromEntries(
    Object.entries(parsed).filter(([ip, at]) => IPV4.test(ip) && typeof at === 'string' && !Number.isNaN(Date.parse(at))),
  ) as HostedPodIps;
}

// What the operator allows in node serving certificates, beyond what a node
// reports about itself (it writes its own addresses): IP SANs only inside the
// configured node ranges, DNS SANs only the node's name or names matching a
// configured pattern — kubelet-csr-approver's PROVIDER_IP_PREFIXES and
// PROVIDER_REGEX. Under `vkvm up` the ranges default to the networks of the
// host's own interfaces, where hosts that join it live.
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import ipaddr from 'ipaddr.js';

export interface ServingCsrPolicy {
  /** CIDRs every IP SAN must fall in; none configured: no IP SAN is approved. */
  nodeIpRanges: readonly string[];
  /** A regular expression every DNS SAN other than the node's name must match entirely; none: only the name. */
  dnsPattern?: string;
}

/** CIDRs in network form (192.0.2.0/24 for 192.0.2.7/24); throws on anything else. */
export function parseNodeIpRanges(values: readonly string[]): string[] {
  return values.map((v) => {
    if (!isIP(v.split('/')[0] ?? '') || !ipaddr.isValidCIDR(v))
      throw new Error(`${JSON.stringify(v)} is not a CIDR (address/prefix length)`);
    const [addr, bits] = ipaddr.parseCIDR(v);
    const network = addr.kind() === 'ipv4' ? ipaddr.IPv4.networkAddressFromCIDR(v) : ipaddr.IPv6.networkAddressFromCIDR(v);
    return `${network.toString()}/${bits}`;
  });
}

/** Throws unless `pattern` compiles. */
export function checkDnsPattern(pattern: string): string {
  dnsPatternRegExp(pattern);
  return pattern;
}

/** The pattern anchored: it must match the whole name, never a part of it. */
export const dnsPatternRegExp = (pattern: string): RegExp => new RegExp(`^(?:${pattern})$`, 'i');

export function ipInRanges(ip: string, ranges: readonly string[]): boolean {
  const addr = ipaddr.process(ip);
  return ranges.some((r) => {
    const range = ipaddr.parseCIDR(r);
    return range[0].kind() === addr.kind() && addr.match(range);
  });
}

/**
 * The networks of this host's interfaces (`ip addr`'s address/prefix, as
 * networks), without loopback, link-local addresses and the `exclude`d
 * interfaces (the VM bridge: guests are not nodes).
 */
export function localNodeRanges(exclude: readonly string[] = []): string[] {
  const ranges = Object.entries(networkInterfaces()).flatMap(([name, addrs]) =>
    exclude.includes(name)
      ? []
      : (addrs ?? []).filter((a) => !a.internal && a.cidr && ipaddr.process(a.address).range() !== 'linkLocal').map((a) => a.cidr!),
  );
  return [...new Set(parseNodeIpRanges(ranges))];
}

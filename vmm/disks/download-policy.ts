// Where an image URL may lead. Downloads run as root on the node, so a URL
// naming the node itself (loopback, its own addresses), a link-local service
// (cloud metadata at 169.254.169.254) or the cluster's service range would
// turn a node-local secret into a disk the guest can read. Every address is
// checked after DNS resolution and again on every redirect, and the
// connection goes to the address that was checked (no second lookup).
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { networkInterfaces } from 'node:os';
import ipaddr from 'ipaddr.js';

export interface DownloadPolicy {
  /** Largest image accepted; a body past it is cut off and refused. */
  maxBytes: number;
  /** The whole download, every redirect included. */
  timeoutMs: number;
  /** No byte for this long ends the download. */
  idleTimeoutMs: number;
  /** Refused besides the built-in ranges and the node's own addresses (e.g. the cluster's service range). */
  deniedCidrs: readonly string[];
  /** The node operator's exceptions, which win over every refusal (a mirror on the node, a test server). */
  allowedCidrs: readonly string[];
}

export const DEFAULT_DOWNLOAD_POLICY: DownloadPolicy = {
  maxBytes: 20 * 2 ** 30,
  timeoutMs: 60 * 60_000,
  idleTimeoutMs: 60_000,
  deniedCidrs: [],
  allowedCidrs: [],
};

/** ipaddr.js's range names that never hold an image server a VM may use. */
const DENIED_RANGES: Record<string, string> = {
  unspecified: 'an unspecified address',
  loopback: "the node's loopback",
  linkLocal: 'a link-local address (cloud metadata services live there)',
  multicast: 'a multicast address',
  broadcast: 'a broadcast address',
  reserved: 'a reserved address',
};

type Parsed = ipaddr.IPv4 | ipaddr.IPv6;

/** IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry. */
function parse(address: string): Parsed {
  const ip = ipaddr.parse(address);
  return ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress() ? (ip as ipaddr.IPv6).toIPv4Address() : ip;
}

function inCidr(ip: Parsed, cidr: string): boolean {
  const [net, bits] = ipaddr.parseCIDR(cidr);
  return ip.kind() === net.kind() && ip.match([net, bits] as [Parsed, number]);
}

function nodeAddresses(): Parsed[] {
  return (
    Object.values(networkInterfaces())
      .flatMap((list) => list ?? [])
      // Loopback has its own, clearer refusal.
      .filter((i) => !i.internal)
      .map((i) => parse(i.address.replace(/%.*$/, '')))
  );
}

/** Why `address` may not be downloaded from, or undefined when it may. */
export function refusalOf(address: string, policy: DownloadPolicy): string | undefined {
  const ip = parse(address);
  if (policy.allowedCidrs.some((c) => inCidr(ip, c))) return undefined;
  if (nodeAddresses().some((own) => own.kind() === ip.kind() && own.toNormalizedString() === ip.toNormalizedString())) {
    return `${address} is an address of this node`;
  }
  const range = DENIED_RANGES[ip.range()];
  if (range) return `${address} is ${range}`;
  const denied = policy.deniedCidrs.find((c) => inCidr(ip, c));
  return denied ? `${address} is in ${denied}, which this node refuses` : undefined;
}

export class AddressRefusedError extends Error {
  readonly kind = 'AddressRefusedError';
}

/**
 * A `lookup` for http(s).request that resolves as usual and refuses the host
 * when any of its addresses is refused (a name answering both a public and a
 * loopback address would otherwise connect to either).
 */
export function guardedLookup(policy: DownloadPolicy): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, '');
      const refused = addresses.map((a) => refusalOf(a.address, policy)).find(Boolean);
      if (refused) return callback(new AddressRefusedError(`${hostname}: ${refused}`), '');
      if (options.all) return callback(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
}

// IPv4 ranges as integers: the pod range of a node, its gateway and the
// addresses VMs may hold. Parsing and validation are ipaddr.js's.
import ipaddr from 'ipaddr.js';

export interface Ipv4Range {
  /** As given, normalized: "10.244.1.0/24". */
  cidr: string;
  prefixLength: number;
  /** Network address as an unsigned 32-bit integer. */
  network: number;
  /** Broadcast address as an unsigned 32-bit integer. */
  broadcast: number;
}

export function ipToInt(ip: string): number {
  return ipaddr.IPv4.parse(ip)
    .toByteArray()
    .reduce((n, b) => n * 256 + b, 0);
}

export function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** Parses an IPv4 CIDR with room for a gateway and at least two VMs; throws naming `field`. */
export function parseIpv4Range(cidr: string, field: string): Ipv4Range {
  let parsed: [ipaddr.IPv4 | ipaddr.IPv6, number];
  try {
    parsed = ipaddr.parseCIDR(cidr);
  } catch {
    throw new Error(`${field}: ${JSON.stringify(cidr)} is not a CIDR such as 10.244.0.0/24`);
  }
  const [addr, prefixLength] = parsed;
  if (addr.kind() !== 'ipv4') throw new Error(`${field}: ${cidr} is IPv6; vkvm's pod network is IPv4 only`);
  if (prefixLength > 29) throw new Error(`${field}: ${cidr} is too small; a node's pod range needs at least a /29`);
  const size = 2 ** (32 - prefixLength);
  const network = ipToInt(addr.toString()) - (ipToInt(addr.toString()) % size);
  return { cidr: `${intToIp(network)}/${prefixLength}`, prefixLength, network, broadcast: network + size - 1 };
}

/** The node's own address in its range (the VMs' default route): the first host address. */
export function gatewayOf(range: Ipv4Range): string {
  return intToIp(range.network + 1);
}

/** Addresses a VM may hold: every host address but the gateway. */
export function firstVmAddress(range: Ipv4Range): number {
  return range.network + 2;
}

export function contains(range: Ipv4Range, ip: string): boolean {
  const n = ipToInt(ip);
  return n > range.network && n < range.broadcast;
}

// Ethernet frames a spoofing guest would send, built byte by byte for
// rawsend (rawsend.c): ARP, IPv4/UDP, DHCP client messages and IPv6 router
// advertisements, with valid checksums so that only a filter can stop them.
export const BROADCAST = 'ff:ff:ff:ff:ff:ff';
const ETH_ARP = 0x0806;
const ETH_RARP = 0x8035;
const ETH_IPV4 = 0x0800;
const ETH_IPV6 = 0x86dd;

const macBytes = (mac: string): Buffer => Buffer.from(mac.split(':').map((h) => parseInt(h, 16)));
const ipv4Bytes = (ip: string): Buffer => Buffer.from(ip.split('.').map(Number));
const u16 = (n: number): Buffer => Buffer.from([n >> 8, n & 0xff]);
const u32 = (n: number): Buffer => Buffer.from([n >>> 24, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff]);

/** The Internet checksum (RFC 1071). */
function checksum(data: Buffer): number {
  let sum = 0;
  for (let i = 0; i < data.length; i += 2) sum += (data[i]! << 8) | (data[i + 1] ?? 0);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

function ethernet(dst: string, src: string, type: number, payload: Buffer): Buffer {
  return Buffer.concat([macBytes(dst), macBytes(src), u16(type), payload]);
}

/**
 * An ARP packet from `mac` claiming `ip`: a gratuitous request (sender and
 * target address both `ip`) or an unsolicited reply, the two forms hosts
 * learn from.
 */
export function arpClaim(mac: string, ip: string, op: 'request' | 'reply'): Buffer {
  const target = op === 'request' ? '00:00:00:00:00:00' : BROADCAST;
  const arp = Buffer.concat([
    u16(1),
    u16(ETH_IPV4),
    Buffer.from([6, 4]),
    u16(op === 'request' ? 1 : 2),
    macBytes(mac),
    ipv4Bytes(ip),
    macBytes(target),
    ipv4Bytes(ip),
  ]);
  return ethernet(BROADCAST, mac, ETH_ARP, arp);
}

/**
 * QEMU's self-announce after a migration (qemu_announce_self): a RARP
 * reverse request from the guest's MAC about itself, broadcast.
 */
export function selfAnnounce(mac: string): Buffer {
  const rarp = Buffer.concat([u16(1), u16(ETH_IPV4), Buffer.from([6, 4]), u16(3), macBytes(mac), u32(0), macBytes(mac), u32(0)]);
  return ethernet(BROADCAST, mac, ETH_RARP, rarp);
}

/**
 * An IPv4 UDP datagram in a frame (UDP checksum 0: none, which IPv4 allows).
 * `firstFragment`: only the first fragment, the UDP header and 8 bytes.
 */
export function udp4(o: {
  srcMac: string;
  dstMac: string;
  src: string;
  dst: string;
  sport: number;
  dport: number;
  payload: Buffer;
  firstFragment?: boolean;
}): Buffer {
  const datagram = Buffer.concat([u16(o.sport), u16(o.dport), u16(8 + o.payload.length), u16(0), o.payload]);
  const udp = o.firstFragment ? datagram.subarray(0, 16) : datagram;
  const flags = o.firstFragment ? 0x2000 : 0; // more fragments, offset 0
  const header = Buffer.concat([
    Buffer.from([0x45, 0]),
    u16(20 + udp.length),
    u16(0x766b),
    u16(flags),
    Buffer.from([64, 17]),
    u16(0),
    ipv4Bytes(o.src),
    ipv4Bytes(o.dst),
  ]);
  header.writeUInt16BE(checksum(header), 10);
  return ethernet(o.dstMac, o.srcMac, ETH_IPV4, Buffer.concat([header, udp]));
}

/**
 * A DHCP DECLINE of `ip` in `chaddr`'s name to the server `server`, sent as
 * clients send it (from 0.0.0.0 to the broadcast address): the server then
 * refuses `ip` to `chaddr` for a while.
 */
export function dhcpDecline(o: { srcMac: string; chaddr: string; ip: string; server: string }): Buffer {
  const bootp = Buffer.alloc(236);
  bootp.set([1, 1, 6, 0]); // BOOTREQUEST, Ethernet, 6-byte addresses, no hops
  bootp.writeUInt32BE(0x766b766d, 4); // xid
  macBytes(o.chaddr).copy(bootp, 28);
  const options = Buffer.concat([
    Buffer.from([0x63, 0x82, 0x53, 0x63]), // magic cookie
    Buffer.from([53, 1, 4]), // DHCPDECLINE
    Buffer.from([50, 4]),
    ipv4Bytes(o.ip), // requested (declined) address
    Buffer.from([54, 4]),
    ipv4Bytes(o.server), // server identifier
    Buffer.from([255]),
  ]);
  return udp4({
    srcMac: o.srcMac,
    dstMac: BROADCAST,
    src: '0.0.0.0',
    dst: '255.255.255.255',
    sport: 68,
    dport: 67,
    payload: Buffer.concat([bootp, options]),
  });
}

/** The modified EUI-64 link-local address of `mac`. */
function linkLocal(mac: string): Buffer {
  const m = macBytes(mac);
  return Buffer.from([0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0]! ^ 2, m[1]!, m[2]!, 0xff, 0xfe, m[3]!, m[4]!, m[5]!]);
}

/**
 * An IPv6 router advertisement from `mac` to all nodes, announcing `prefix`
 * (8 bytes, a /64) as on-link and for address autoconfiguration. Router
 * lifetime 0: it offers no default route, so a host that accepts it gains a
 * prefix route and an address but sends nothing anywhere else.
 */
export function routerAdvertisement(mac: string, prefix: Buffer): Buffer {
  const src = linkLocal(mac);
  const dst = Buffer.from([0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
  const prefixInfo = Buffer.concat([Buffer.from([3, 4, 64, 0xc0]), u32(3600), u32(1800), u32(0), prefix, Buffer.alloc(8)]);
  const sourceLinkLayer = Buffer.concat([Buffer.from([1, 1]), macBytes(mac)]);
  // type 134, code 0, checksum, hop limit 64, no flags, router lifetime 0, reachable time 0, retrans timer 0
  const icmp = Buffer.concat([Buffer.from([134, 0, 0, 0, 64, 0]), u16(0), u32(0), u32(0), sourceLinkLayer, prefixInfo]);
  const pseudo = Buffer.concat([src, dst, u32(icmp.length), Buffer.from([0, 0, 0, 58])]);
  icmp.writeUInt16BE(checksum(Buffer.concat([pseudo, icmp])), 2);
  const header = Buffer.concat([Buffer.from([0x60, 0, 0, 0]), u16(icmp.length), Buffer.from([58, 255]), src, dst]);
  return ethernet('33:33:00:00:00:01', mac, ETH_IPV6, Buffer.concat([header, icmp]));
}

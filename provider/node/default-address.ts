// The node's InternalIP when none is configured: the IPv4 address of the
// interface the default route leaves by. Read from /proc/net/route and the
// process's own interface list, without starting a process: the lease's
// health check and the status loop read host facts every few seconds.
import { readFile } from 'node:fs/promises';
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';

/** The interface of the IPv4 default route with the lowest metric, from /proc/net/route (pure). */
export function defaultRouteInterface(procNetRoute: string): string | undefined {
  let best: { iface: string; metric: number } | undefined;
  for (const line of procNetRoute.split('\n').slice(1)) {
    // Iface Destination Gateway Flags RefCnt Use Metric Mask …; RTF_UP is flag 0x1.
    const [iface, destination, , flags, , , metric, mask] = line.trim().split(/\s+/);
    if (!iface || destination !== '00000000' || mask !== '00000000' || !(parseInt(flags ?? '0', 16) & 1)) continue;
    const m = Number(metric);
    if (!best || m < best.metric) best = { iface, metric: m };
  }
  return best?.iface;
}

/** The first IPv4 address of `iface` that is not loopback. */
export function ipv4Of(iface: string, interfaces: NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces()): string | undefined {
  return interfaces[iface]?.find((a) => a.family === 'IPv4' && !a.internal)?.address;
}

/** The default route's interface's IPv4 address; null when there is no default route or it has none. */
export async function defaultRouteAddress(procNetRoute = '/proc/net/route'): Promise<string | null> {
  const iface = defaultRouteInterface(await readFile(procNetRoute, 'utf8').catch(() => ''));
  return (iface && ipv4Of(iface)) ?? null;
}

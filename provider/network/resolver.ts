// Resolvers: the host's, as guests can use it, and the shape of what a
// guest is handed (by DHCP and cloud-init's network-config).
import { readFile } from 'node:fs/promises';

/** A guest's resolver. */
export interface GuestDns {
  nameservers: string[];
  searches: string[];
}

const SYSTEMD_RESOLVED_UPSTREAMS = '/run/systemd/resolve/resolv.conf';

/**
 * The host's resolver as guests can use it: its nameservers without loopback
 * ones (a guest cannot reach the host's 127.0.0.53), and its search domains;
 * behind systemd-resolved, its upstreams' file.
 */
export async function hostResolver(resolvConf = '/etc/resolv.conf'): Promise<GuestDns> {
  const read = async (file: string) => {
    const text = await readFile(file, 'utf8').catch(() => '');
    const listed = [...text.matchAll(/^\s*nameserver\s+(\d+\.\d+\.\d+\.\d+)\s*$/gm)].map((m) => m[1]!);
    return { listed, nameservers: listed.filter((ip) => !ip.startsWith('127.')), searches: resolvConfSearches(text) };
  };
  const own = await read(resolvConf);
  if (own.nameservers.length || !own.listed.length) return { nameservers: own.nameservers, searches: own.searches };
  const upstream = await read(SYSTEMD_RESOLVED_UPSTREAMS);
  return { nameservers: upstream.nameservers, searches: upstream.searches };
}

/** The search domains of a resolv.conf's text: its last `search` or `domain` line, as the resolver reads it. */
export function resolvConfSearches(text: string): string[] {
  let searches: string[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*(search|domain)\s+(.+?)\s*$/.exec(line);
    if (m) searches = [...new Set(m[2]!.split(/\s+/).filter((s) => s !== '.'))];
  }
  return searches;
}

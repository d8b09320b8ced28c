// The cluster DNS this node tells ClusterFirst guests: the operator's
// --cluster-dns, else the ClusterIP of Service kube-system/kube-dns (the
// name kubeadm and CoreDNS's manifests give it), looked up now and then so
// a DNS installed after the agent is picked up without a restart.
import type { V1Service } from '@kubernetes/client-node';
import { every, systemClock, type Clock } from '../clock.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import type { GuestDns } from '../network/resolver.js';
import type { NodeDns } from '../pods/guest-dns.js';

const LOOKUP_INTERVAL_MS = 30_000;

/** The Service's IPv4 cluster addresses (none for a headless or dual-stack-only-v6 Service). Pure. */
export function serviceDnsAddresses(svc: V1Service | undefined): string[] {
  const ips = svc?.spec?.clusterIPs ?? (svc?.spec?.clusterIP ? [svc.spec.clusterIP] : []);
  return ips.filter((ip) => ip !== 'None' && !ip.includes(':'));
}

export interface ClusterDnsOptions {
  /** --cluster-dns: when given, nothing is looked up. */
  given?: string[];
  domain: string;
  host: GuestDns;
  /** Reads kube-system/kube-dns; undefined when it does not exist. */
  readService: () => Promise<V1Service | undefined>;
  log: Logger;
  clock?: Clock;
}

export class ClusterDns {
  private found: string[];
  private stopLookups: (() => Promise<void>) | undefined;

  constructor(private readonly o: ClusterDnsOptions) {
    this.found = o.given ?? [];
  }

  /** What guests are told now. */
  current(): NodeDns {
    return {
      clusterDns: this.found,
      clusterDomain: this.o.domain,
      hostNameservers: this.o.host.nameservers,
      hostSearches: this.o.host.searches,
    };
  }

  /** Looks kube-dns up once now, then every 30 s (nothing when --cluster-dns was given). */
  async start(): Promise<void> {
    if (this.o.given) return;
    await this.lookup();
    this.stopLookups = every(this.o.clock ?? systemClock, LOOKUP_INTERVAL_MS, () => this.lookup());
  }

  async stop(): Promise<void> {
    await this.stopLookups?.();
  }

  private async lookup(): Promise<void> {
    try {
      const next = serviceDnsAddresses(await this.o.readService());
      if (next.join() !== this.found.join())
        this.o.log.info(
          { clusterDns: next },
          next.length
            ? 'cluster DNS found (kube-system/kube-dns)'
            : 'no cluster DNS (kube-system/kube-dns): ClusterFirst guests get the host’s',
        );
      this.found = next;
    } catch (err) {
      this.o.log.warn({ err }, 'could not look up the cluster DNS (kube-system/kube-dns); keeping what was known');
    }
  }
}

/** kube-system/kube-dns through `read`, undefined when absent. */
export async function readKubeDns(read: (req: { name: string; namespace: string }) => Promise<V1Service>): Promise<V1Service | undefined> {
  return read({ name: 'kube-dns', namespace: 'kube-system' }).catch((err: unknown) => {
    if (isNotFound(err)) return undefined;
    throw err;
  });
}

// The resolver configuration a VM's guest is handed (by DHCP and cloud-init's
// network-config), from the pod's dnsPolicy and dnsConfig by the kubelet's
// rules (pkg/kubelet/network/dns): ClusterFirst gets the cluster DNS and the
// namespace's search path, Default the node's resolv.conf, None only what
// dnsConfig says; dnsConfig is appended to any of them. A VMI's launcher pod
// carries the VMI's dnsPolicy and dnsConfig, as KubeVirt copies them.
// DHCP has no field for resolver options (ndots and the like): they are
// reported, not delivered.
import type { V1Pod } from '@kubernetes/client-node';
import type { GuestDns } from '../network/resolver.js';

/** What the node knows of DNS: the cluster's (kubelet's --cluster-dns/--cluster-domain) and its own resolv.conf. */
export interface NodeDns {
  clusterDns: string[];
  clusterDomain: string;
  hostNameservers: string[];
  hostSearches: string[];
}

/** A warning the kubelet would record as an event on the pod. */
export interface DnsWarning {
  reason: 'MissingClusterDNS' | 'DNSConfigForming';
  message: string;
}

// The kubelet's limits (glibc's): 3 nameservers, 32 search paths of at most 2048 characters in all.
const MAX_NAMESERVERS = 3;
const MAX_SEARCHES = 32;
const MAX_SEARCH_CHARS = 2048;

function unique(xs: readonly string[]): string[] {
  return [...new Set(xs.filter((x) => x !== ''))];
}

/** The search path of a ClusterFirst pod: its namespace's, the services', the cluster's, then the node's. */
export function clusterSearches(namespace: string, domain: string, hostSearches: readonly string[]): string[] {
  return unique([`${namespace}.svc.${domain}`, `svc.${domain}`, domain, ...hostSearches]);
}

/** The guest's resolver for `pod` on this node, and what the kubelet would warn of. Pure. */
export function guestDnsOf(pod: V1Pod, node: NodeDns): { dns: GuestDns; warnings: DnsWarning[] } {
  const warnings: DnsWarning[] = [];
  const policy = pod.spec?.dnsPolicy ?? 'ClusterFirst';
  const namespace = pod.metadata?.namespace ?? 'default';
  let base: GuestDns;
  if (policy === 'None') base = { nameservers: [], searches: [] };
  else if (policy === 'Default' || (policy === 'ClusterFirst' && pod.spec?.hostNetwork)) {
    base = { nameservers: node.hostNameservers, searches: node.hostSearches };
  } else if (!node.clusterDns.length) {
    warnings.push({
      reason: 'MissingClusterDNS',
      message: `pod: "${pod.metadata?.name}_${namespace}(${pod.metadata?.uid})". kubelet does not have ClusterDNS IP configured and cannot create Pod using "${policy}" policy. Falling back to "Default" policy.`,
    });
    base = { nameservers: node.hostNameservers, searches: node.hostSearches };
  } else {
    base = { nameservers: node.clusterDns, searches: clusterSearches(namespace, node.clusterDomain, node.hostSearches) };
  }
  const extra = pod.spec?.dnsConfig;
  let nameservers = unique([...base.nameservers, ...(extra?.nameservers ?? [])]);
  let searches = unique([...base.searches, ...(extra?.searches ?? [])]);
  const omitted: string[] = [];
  if (nameservers.length > MAX_NAMESERVERS) {
    omitted.push(`nameservers ${nameservers.slice(MAX_NAMESERVERS).join(' ')}`);
    nameservers = nameservers.slice(0, MAX_NAMESERVERS);
  }
  let chars = 0;
  const kept = searches.filter((s, i) => i < MAX_SEARCHES && (chars += s.length + 1) <= MAX_SEARCH_CHARS + 1);
  if (kept.length < searches.length) omitted.push(`search domains ${searches.slice(kept.length).join(' ')}`);
  searches = kept;
  const options = (extra?.options ?? []).map((o) => (o.value === undefined ? o.name : `${o.name}:${o.value}`));
  if (options.length) {
    warnings.push({
      reason: 'DNSConfigForming',
      message: `resolver options cannot be handed to a VM's guest by DHCP and are not applied: ${options.join(' ')}`,
    });
  }
  if (omitted.length) {
    warnings.push({
      reason: 'DNSConfigForming',
      message: `DNS limits were exceeded, some entries have been omitted (${omitted.join('; ')}); the applied configuration is: nameservers ${nameservers.join(' ')}; search ${searches.join(' ')}`,
    });
  }
  return { dns: { nameservers, searches }, warnings };
}

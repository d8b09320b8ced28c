import t from 'tap';
import type { V1Pod, V1PodDNSConfig } from '@kubernetes/client-node';
import { guestDnsOf, type NodeDns } from './guest-dns.js';

const node: NodeDns = {
  clusterDns: ['10.96.0.10'],
  clusterDomain: 'cluster.local',
  hostNameservers: ['192.0.2.53'],
  hostSearches: ['corp.example'],
};

function pod(dnsPolicy?: string, dnsConfig?: V1PodDNSConfig, hostNetwork?: boolean): V1Pod {
  return {
    metadata: { name: 'p', namespace: 'team-a', uid: 'u1' },
    spec: {
      containers: [],
      ...(dnsPolicy ? { dnsPolicy } : {}),
      ...(dnsConfig ? { dnsConfig } : {}),
      ...(hostNetwork ? { hostNetwork } : {}),
    },
  };
}

t.test('each dnsPolicy, as the kubelet forms it', async (t) => {
  const clusterFirst = {
    nameservers: ['10.96.0.10'],
    searches: ['team-a.svc.cluster.local', 'svc.cluster.local', 'cluster.local', 'corp.example'],
  };
  const host = { nameservers: ['192.0.2.53'], searches: ['corp.example'] };
  const cases: Array<[string, V1Pod, NodeDns, unknown]> = [
    ['unset is ClusterFirst', pod(), node, clusterFirst],
    ['ClusterFirst', pod('ClusterFirst'), node, clusterFirst],
    ['ClusterFirstWithHostNet', pod('ClusterFirstWithHostNet'), node, clusterFirst],
    ['ClusterFirst with hostNetwork is Default', pod('ClusterFirst', undefined, true), node, host],
    ['Default', pod('Default'), node, host],
    [
      'None takes only dnsConfig',
      pod('None', { nameservers: ['1.1.1.1'], searches: ['x.example'] }),
      node,
      { nameservers: ['1.1.1.1'], searches: ['x.example'] },
    ],
    [
      'dnsConfig is appended without duplicates',
      pod('ClusterFirst', { nameservers: ['10.96.0.10', '9.9.9.9'], searches: ['cluster.local', 'y.example'] }),
      node,
      { nameservers: ['10.96.0.10', '9.9.9.9'], searches: [...clusterFirst.searches, 'y.example'] },
    ],
    [
      'another cluster domain',
      pod(),
      { ...node, clusterDomain: 'k8s.example', hostSearches: [] },
      { nameservers: ['10.96.0.10'], searches: ['team-a.svc.k8s.example', 'svc.k8s.example', 'k8s.example'] },
    ],
  ];
  for (const [name, p, n, want] of cases) {
    const got = guestDnsOf(p, n);
    t.same(got.dns, want, name);
    t.same(got.warnings, [], `${name}: no warning`);
  }
});

t.test('ClusterFirst on a node without cluster DNS falls back to Default with the kubelet’s warning', async (t) => {
  const got = guestDnsOf(pod('ClusterFirst'), { ...node, clusterDns: [] });
  t.same(got.dns, { nameservers: ['192.0.2.53'], searches: ['corp.example'] });
  t.equal(got.warnings[0]?.reason, 'MissingClusterDNS');
  t.match(
    got.warnings[0]?.message,
    /kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy/,
  );
});

t.test('over the limits: 3 nameservers, 32 search paths, 2048 characters; the rest omitted with a warning', async (t) => {
  const many = pod('ClusterFirst', {
    nameservers: ['1.1.1.1', '2.2.2.2', '3.3.3.3'],
    searches: Array.from({ length: 40 }, (_, i) => `d${i}.example`),
  });
  const got = guestDnsOf(many, node);
  t.same(got.dns.nameservers, ['10.96.0.10', '1.1.1.1', '2.2.2.2']);
  t.equal(got.dns.searches.length, 32);
  t.equal(got.warnings[0]?.reason, 'DNSConfigForming');
  t.match(got.warnings[0]?.message, /nameservers 3\.3\.3\.3/);
  const long = pod('None', {
    nameservers: ['1.1.1.1'],
    searches: Array.from({ length: 10 }, (_, i) => `${String(i).padStart(250, 'a')}.x`),
  });
  const kept = guestDnsOf(long, node).dns.searches;
  t.ok(kept.join(' ').length <= 2048, 'within 2048 characters');
  t.equal(kept.length, 8);
});

t.test('resolver options are reported, not silently dropped', async (t) => {
  const got = guestDnsOf(pod('ClusterFirst', { options: [{ name: 'ndots', value: '2' }, { name: 'edns0' }] }), node);
  t.same(got.warnings, [
    { reason: 'DNSConfigForming', message: "resolver options cannot be handed to a VM's guest by DHCP and are not applied: ndots:2 edns0" },
  ]);
});

import t from 'tap';
import { pino } from 'pino';
import type { V1Service } from '@kubernetes/client-node';
import { fakeClock } from '../../test/helpers/fake-clock.js';
import { ClusterDns, serviceDnsAddresses } from './cluster-dns.js';

const host = { nameservers: ['192.0.2.53'], searches: [] };
const log = pino({ level: 'silent' });
const svc = (clusterIPs: string[]): V1Service => ({ spec: { clusterIP: clusterIPs[0], clusterIPs } });

t.test('the IPv4 cluster addresses of kube-dns; none when headless or absent', async (t) => {
  t.same(serviceDnsAddresses(svc(['10.96.0.10'])), ['10.96.0.10']);
  t.same(serviceDnsAddresses(svc(['fd00::a', '10.96.0.10'])), ['10.96.0.10']);
  t.same(serviceDnsAddresses(svc(['None'])), []);
  t.same(serviceDnsAddresses(undefined), []);
});

t.test('looked up at start and every 30 s; a failed lookup keeps what was known', async (t) => {
  const clock = fakeClock();
  let answer: () => Promise<V1Service | undefined> = () => Promise.resolve(undefined);
  const dns = new ClusterDns({ domain: 'cluster.local', host, readService: () => answer(), log, clock });
  await dns.start();
  t.teardown(() => dns.stop());
  t.same(dns.current().clusterDns, [], 'none yet');
  answer = () => Promise.resolve(svc(['10.96.0.10']));
  clock.advance(30_000);
  await new Promise((r) => setImmediate(r));
  t.same(dns.current(), { clusterDns: ['10.96.0.10'], clusterDomain: 'cluster.local', hostNameservers: ['192.0.2.53'], hostSearches: [] });
  answer = () => Promise.reject(new Error('apiserver down'));
  clock.advance(30_000);
  await new Promise((r) => setImmediate(r));
  t.same(dns.current().clusterDns, ['10.96.0.10'], 'kept');
});

t.test('--cluster-dns given: nothing is looked up', async (t) => {
  let reads = 0;
  const dns = new ClusterDns({
    given: ['10.0.0.10'],
    domain: 'k.example',
    host,
    readService: () => (reads++, Promise.resolve(undefined)),
    log,
  });
  await dns.start();
  await dns.stop();
  t.equal(reads, 0);
  t.same(dns.current().clusterDns, ['10.0.0.10']);
});

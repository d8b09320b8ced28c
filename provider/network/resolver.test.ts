import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { hostResolver, resolvConfSearches } from './resolver.js';

t.test('the node’s search domains from resolv.conf: the last search or domain line wins', async (t) => {
  t.same(resolvConfSearches('nameserver 1.1.1.1\nsearch a.example b.example\n'), ['a.example', 'b.example']);
  t.same(resolvConfSearches('domain old.example\nsearch new.example\n'), ['new.example']);
  t.same(resolvConfSearches('search .\n'), []);
  t.same(resolvConfSearches('# search commented.example\n'), []);
});

t.test('the host resolver guests get: no loopback nameservers, the search domains', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'vkvm-resolv-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const conf = path.join(dir, 'resolv.conf');
  await writeFile(conf, 'nameserver 127.0.0.1\nnameserver 192.0.2.53\nsearch corp.example\noptions ndots:2\n');
  t.same(await hostResolver(conf), { nameservers: ['192.0.2.53'], searches: ['corp.example'] });
  t.same(await hostResolver(path.join(dir, 'absent')), { nameservers: [], searches: [] });
});

import t from 'tap';
import { DockerKeyring, keyringFromSecrets, type PullSecret } from './keyring.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const cred = (name: string) => ({ username: name, password: 'pw', from: 'ns/s' });

t.test('lookup matches host, port and path prefix, most specific first, as the kubelet keyring', async (t) => {
  const k = new DockerKeyring();
  for (const key of [
    'registry.example.com',
    'registry.example.com/team',
    'https://registry.example.com/team/app',
    '*.example.com',
    'registry.example.com:5000',
    'http://other.example.org/v2/',
  ]) {
    k.add(key, cred(key));
  }
  const names = (image: string) => k.lookup(image).map((c) => c.username);
  t.same(names('registry.example.com/team/app'), [
    'https://registry.example.com/team/app',
    'registry.example.com/team',
    'registry.example.com',
    '*.example.com',
  ]);
  t.same(names('registry.example.com/other/app'), ['registry.example.com', '*.example.com']);
  t.same(names('registry.example.com:5000/x'), ['registry.example.com:5000'], 'the port must match');
  t.same(names('other.example.org/x'), ['http://other.example.org/v2/'], 'a scheme and /v2/ count as the bare host');
  t.same(names('a.b.example.com/x'), [], 'a glob matches one label only');
  t.same(names('quay.io/x'), []);
});

t.test("Docker Hub's legacy key serves docker.io images only when nothing else matched", async (t) => {
  const k = new DockerKeyring();
  k.add('https://index.docker.io/v1/', cred('hub'));
  t.same(
    k.lookup('docker.io/library/busybox').map((c) => c.username),
    ['hub'],
  );
  t.same(k.lookup('quay.io/a/b'), []);
  k.add('docker.io', cred('docker.io'));
  t.same(
    k.lookup('docker.io/library/busybox').map((c) => c.username),
    ['docker.io'],
  );
});

t.test('pull secrets: dockerconfigjson and dockercfg, auth decoded, other types ignored', async (t) => {
  const secrets: PullSecret[] = [
    {
      namespace: 'ns',
      name: 'json',
      type: 'kubernetes.io/dockerconfigjson',
      data: { '.dockerconfigjson': b64(JSON.stringify({ auths: { '127.0.0.1:5000': { auth: b64('alice:s3cret:with:colons') } } })) },
    },
    {
      namespace: 'ns',
      name: 'legacy',
      type: 'kubernetes.io/dockercfg',
      data: { '.dockercfg': b64(JSON.stringify({ 'quay.io': { username: 'bob', password: 'pw' } })) },
    },
    {
      namespace: 'ns',
      name: 'opaque',
      type: 'Opaque',
      data: { '.dockerconfigjson': b64(JSON.stringify({ auths: { 'ghcr.io': { username: 'x', password: 'y' } } })) },
    },
  ];
  const k = keyringFromSecrets(secrets);
  t.same(k.lookup('127.0.0.1:5000/disk'), [{ username: 'alice', password: 's3cret:with:colons', from: 'ns/json' }]);
  t.same(k.lookup('quay.io/a/b'), [{ username: 'bob', password: 'pw', from: 'ns/legacy' }]);
  t.same(k.lookup('ghcr.io/a'), [], 'an Opaque secret adds nothing');
  t.throws(
    () =>
      keyringFromSecrets([
        { namespace: 'ns', name: 'broken', type: 'kubernetes.io/dockerconfigjson', data: { '.dockerconfigjson': b64('{not json') } },
      ]),
    { reason: 'ErrImagePull', message: /pull secret ns\/broken does not hold a valid \.dockerconfigjson/ },
  );
});

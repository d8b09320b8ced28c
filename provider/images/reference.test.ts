import t from 'tap';
import { ImagePullError } from './errors.js';
import { defaultPullPolicy, formatReference, parseReference } from './reference.js';

const D = 'sha256:' + 'ab'.repeat(32);

t.test('references are normalised as Docker and containerd do', async (t) => {
  const cases: Array<[string, string]> = [
    ['busybox', 'docker.io/library/busybox:latest'],
    ['busybox:1.36', 'docker.io/library/busybox:1.36'],
    ['kubevirt/cirros-container-disk-demo', 'docker.io/kubevirt/cirros-container-disk-demo:latest'],
    ['index.docker.io/library/busybox', 'docker.io/library/busybox:latest'],
    ['docker.io/busybox', 'docker.io/library/busybox:latest'],
    ['quay.io/containerdisks/fedora:41', 'quay.io/containerdisks/fedora:41'],
    ['localhost/vkvm/test-guest', 'localhost/vkvm/test-guest:latest'],
    ['localhost:5000/a/b:v1', 'localhost:5000/a/b:v1'],
    ['127.0.0.1:5000/disk', '127.0.0.1:5000/disk:latest'],
    ['[::1]:5000/disk:v2', '[::1]:5000/disk:v2'],
    [`quay.io/a/b@${D}`, `quay.io/a/b@${D}`],
    [`quay.io/a/b:v1@${D}`, `quay.io/a/b:v1@${D}`],
    ['registry.example.com/a__b/c-d.e_f', 'registry.example.com/a__b/c-d.e_f:latest'],
  ];
  t.same(
    cases.map(([raw]) => formatReference(parseReference(raw))),
    cases.map(([, want]) => want),
  );
  t.same(
    parseReference(`quay.io/a/b:v1@${D}`),
    { domain: 'quay.io', path: 'a/b', tag: 'v1', digest: D },
    'tag and digest both kept; the digest is what is pulled',
  );
});

t.test('invalid names are InvalidImageName, saying why', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['', /at least one component/],
    ['Busybox', /must be lowercase/],
    ['quay.io/Team/app', /must be lowercase/],
    ['busybox:-bad', /invalid reference format/],
    ['busybox@sha256:abc', /invalid digest format/],
    [`busybox@sha512:${'a'.repeat(128)}`, /only sha256/],
    ['a'.repeat(64), /hexadecimal/],
    ['http://example.com/disk.img', /invalid reference format/],
    ['bad_host_/x', /invalid reference format/],
  ];
  for (const [raw, why] of cases) {
    t.throws(() => parseReference(raw), { name: 'ImagePullError', reason: 'InvalidImageName', message: why }, JSON.stringify(raw));
  }
  t.ok(new ImagePullError('InvalidImageName', 'x') instanceof Error);
});

t.test("pull policy defaults to Kubernetes' (latest or no tag: Always)", async (t) => {
  t.same(['busybox', 'busybox:latest', 'busybox:1.36', `busybox@${D}`, `busybox:latest@${D}`, 'NOT VALID'].map(defaultPullPolicy), [
    'Always',
    'Always',
    'IfNotPresent',
    'IfNotPresent',
    'Always',
    'IfNotPresent',
  ]);
});

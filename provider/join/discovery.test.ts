import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import t from 'tap';
import { selfSigned } from '../../test/helpers/self-signed.js';
import { stringify } from 'yaml';
import { caCertHash, parseCaCertHash, verifyClusterInfo, verifyDetached } from './discovery.js';
import { generateBootstrapToken, parseBootstrapToken, type BootstrapToken } from './bootstrap-token.js';

const b64url = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

/** What the bootstrapsigner does (kubeadm's jws.ComputeDetachedSignature): HS256 keyed by the token secret, payload left out. */
function signDetached(content: string, token: BootstrapToken): string {
  const header = b64url(JSON.stringify({ alg: 'HS256', kid: token.id }));
  return `${header}..${b64url(
    createHmac('sha256', token.secret)
      .update(`${header}.${b64url(content)}`)
      .digest(),
  )}`;
}

/** A throwaway self-signed CA, and its hash by the kubeadm documentation's recipe for --discovery-token-ca-cert-hash. */
function makeCa(): { pem: string; opensslHash: string } {
  const pem = selfSigned('/CN=test-ca', 1).certPem;
  const der = execFileSync('openssl', ['x509', '-pubkey', '-noout'], { input: pem });
  const spki = execFileSync('openssl', ['pkey', '-pubin', '-outform', 'der'], { input: der });
  const hex = execFileSync('openssl', ['dgst', '-sha256', '-hex'], { input: spki }).toString().trim().split(' ').pop()!;
  return { pem, opensslHash: `sha256:${hex}` };
}

const ca = makeCa();
const token = parseBootstrapToken('abcdef.0123456789abcdef');
const kubeconfig = stringify({
  apiVersion: 'v1',
  kind: 'Config',
  clusters: [
    { name: '', cluster: { server: 'https://10.0.0.1:6443', 'certificate-authority-data': Buffer.from(ca.pem).toString('base64') } },
  ],
});

t.test('the CA hash is the one kubeadm documents (sha256 of the DER SubjectPublicKeyInfo)', async (t) => {
  t.equal(caCertHash(ca.pem), ca.opensslHash);
});

t.test('a detached JWS made with the token verifies; another secret, content or kid does not', async (t) => {
  const jws = signDetached(kubeconfig, token);
  t.match(jws, /^[\w-]+\.\.[\w-]+$/, 'header..signature (payload detached)');
  t.same(
    {
      good: verifyDetached(kubeconfig, jws, token),
      otherSecret: verifyDetached(kubeconfig, jws, { id: token.id, secret: 'ffffffffffffffff' }),
      otherContent: verifyDetached(kubeconfig + ' ', jws, token),
      otherKid: verifyDetached(kubeconfig, jws, { id: 'zzzzzz', secret: token.secret }),
      garbage: verifyDetached(kubeconfig, 'x.y.z', token),
    },
    { good: true, otherSecret: false, otherContent: false, otherKid: false, garbage: false },
  );
});

t.test('cluster-info is accepted only with the token signature and a matching CA pin', async (t) => {
  const data = { kubeconfig, [`jws-kubeconfig-${token.id}`]: signDetached(kubeconfig, token) };
  t.equal(verifyClusterInfo(data, token, [ca.opensslHash]), Buffer.from(ca.pem).toString('utf8'), 'good: returns the CA');
  t.throws(
    () => verifyClusterInfo(data, token, [`sha256:${'0'.repeat(64)}`]),
    /cluster CA does not match --discovery-token-ca-cert-hash/,
    'wrong pin',
  );
  t.throws(
    () => verifyClusterInfo({ kubeconfig }, token, [ca.opensslHash]),
    /does not know bootstrap token id "abcdef".*unknown or expired/,
    'no signature for the token',
  );
  const other = generateBootstrapToken();
  t.throws(
    () => verifyClusterInfo(data, { id: token.id, secret: other.secret }, [ca.opensslHash]),
    /token secret is wrong/,
    'wrong secret',
  );
});

t.test('bad flag values name the flag', async (t) => {
  t.throws(() => parseBootstrapToken('ABCDEF.0123456789abcdef'), { field: '--token', message: /^--token: / });
  t.throws(() => parseCaCertHash('md5:abc'), { field: '--discovery-token-ca-cert-hash', message: /sha256:<64 hex digits>/ });
  t.equal(parseCaCertHash(`sha256:${'A'.repeat(64)}`), `sha256:${'a'.repeat(64)}`, 'hex is normalised to lower case');
});

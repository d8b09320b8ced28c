import t from 'tap';
import { bootstrapTokenSecret, formatBootstrapToken, generateBootstrapToken, parseBootstrapToken } from './bootstrap-token.js';
import { joinCommand, parseTtl } from './token-create.js';

t.test("generated tokens have kubeadm's shape and parse back", async (t) => {
  const tok = generateBootstrapToken();
  t.match(formatBootstrapToken(tok), /^[a-z0-9]{6}\.[a-z0-9]{16}$/);
  t.same(parseBootstrapToken(formatBootstrapToken(tok)), tok);
});

t.test('the token Secret is what the bootstrap authenticator and signer read', async (t) => {
  const s = bootstrapTokenSecret(
    { id: 'abcdef', secret: '0123456789abcdef' },
    { description: 'd', expiration: new Date('2030-01-02T03:04:05.678Z') },
  );
  t.same(s, {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'bootstrap.kubernetes.io/token',
    metadata: { name: 'bootstrap-token-abcdef', namespace: 'kube-system' },
    stringData: {
      'token-id': 'abcdef',
      'token-secret': '0123456789abcdef',
      'usage-bootstrap-authentication': 'true',
      'usage-bootstrap-signing': 'true',
      'auth-extra-groups': 'system:bootstrappers:vkvm:default-node-token',
      description: 'd',
      expiration: '2030-01-02T03:04:05Z',
    },
  });
});

t.test('--ttl takes kubeadm-style durations and names itself on bad input', async (t) => {
  t.same(
    ['24h', '30m', '1h30m', '90s', '0'].map((d) => parseTtl(d)),
    [86400, 1800, 5400, 90, 0],
  );
  t.throws(() => parseTtl('1d'), { field: '--ttl', message: /^--ttl: / });
  t.throws(() => parseTtl(''), { field: '--ttl', message: /^--ttl: / });
});

t.test('the join command has the kubeadm flags', async (t) => {
  t.equal(
    joinCommand('https://10.0.0.1:6443', { id: 'abcdef', secret: '0123456789abcdef' }, [`sha256:${'a'.repeat(64)}`]),
    `vkvm join --server https://10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:${'a'.repeat(64)}`,
  );
});

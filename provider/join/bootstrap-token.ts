// Bootstrap tokens as kubeadm defines them: "<id>.<secret>", stored in the
// Secret kube-system/bootstrap-token-<id>. The id is public (it names the
// Secret and the cluster-info signature); the secret is the HMAC key.
import { randomInt } from 'node:crypto';
import { ConfigError } from '../config.js';

export interface BootstrapToken {
  id: string;
  secret: string;
}

const TOKEN = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** The group every vkvm token adds, bound to node bootstrapping in deploy/bootstrap-rbac.yaml. */
export const VKVM_BOOTSTRAP_GROUP = 'system:bootstrappers:vkvm:default-node-token';

export function parseBootstrapToken(raw: string, field = '--token'): BootstrapToken {
  const m = TOKEN.exec(raw);
  if (!m?.[1] || !m[2]) throw new ConfigError(field, 'must look like "abcdef.0123456789abcdef" ([a-z0-9]{6}.[a-z0-9]{16})');
  return { id: m[1], secret: m[2] };
}

export const formatBootstrapToken = (t: BootstrapToken): string => `${t.id}.${t.secret}`;

function randomString(n: number): string {
  let s = '';
  for (let i = 0; i < n; i++) s += ALPHABET[randomInt(ALPHABET.length)];
  return s;
}

export function generateBootstrapToken(): BootstrapToken {
  return { id: randomString(6), secret: randomString(16) };
}

/** The Secret the apiserver's bootstrap authenticator and the bootstrapsigner read. */
export function bootstrapTokenSecret(token: BootstrapToken, opts: { expiration?: Date; description: string; groups?: string[] }) {
  const data: Record<string, string> = {
    'token-id': token.id,
    'token-secret': token.secret,
    'usage-bootstrap-authentication': 'true',
    'usage-bootstrap-signing': 'true',
    'auth-extra-groups': (opts.groups ?? [VKVM_BOOTSTRAP_GROUP]).join(','),
    description: opts.description,
  };
  if (opts.expiration) data.expiration = opts.expiration.toISOString().replace(/\.\d{3}Z$/, 'Z');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'bootstrap.kubernetes.io/token',
    metadata: { name: `bootstrap-token-${token.id}`, namespace: 'kube-system' },
    stringData: data,
  };
}

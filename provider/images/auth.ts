// Registry authentication as the distribution spec describes it: a 401
// carries a WWW-Authenticate challenge; `Bearer` sends the client to a token
// service (realm, service, scope) — anonymously, or with Basic credentials
// when it has some — and `Basic` takes the credentials directly. Tokens are
// kept until they expire, per registry, scope and credential.
import type { HttpClient } from './http.js';
import { RegistryError } from './errors.js';
import type { RegistryCredential } from './keyring.js';

export interface Challenge {
  scheme: string;
  params: Record<string, string>;
}

/** Parses `Bearer realm="https://auth",service="registry",scope="repository:a/b:pull"` (values may hold commas). */
export function parseChallenge(header: string): Challenge | undefined {
  const m = /^\s*([A-Za-z][\w-]*)\s*(.*)$/s.exec(header);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  const re = /([A-Za-z][\w-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?\s*/gy;
  let p: RegExpExecArray | null;
  while ((p = re.exec(m[2]!)) !== null && p[0] !== '')
    params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : p[3]!;
  return { scheme: m[1]!.toLowerCase(), params };
}

export function basicAuthorization(cred: RegistryCredential): string {
  return `Basic ${Buffer.from(`${cred.username}:${cred.password}`).toString('base64')}`;
}

/** Tokens without expires_in last 60 s (the spec's default). */
const DEFAULT_TOKEN_S = 60;

interface Token {
  authorization: string;
  expiresAtMs: number;
}

export class TokenCache {
  private readonly tokens = new Map<string, Token>();

  constructor(
    private readonly http: HttpClient,
    private readonly idleTimeoutMs: number,
  ) {}

  /** A cached Authorization header for this registry, repository and credential, if still valid. */
  cached(key: string): string | undefined {
    const t = this.tokens.get(key);
    if (t && t.expiresAtMs > Date.now()) return t.authorization;
    this.tokens.delete(key);
    return undefined;
  }

  /**
   * Answers a challenge: the Authorization header to retry with. A Basic
   * challenge without credentials, or a token service refusing them, is
   * `unauthorized`.
   */
  async answer(key: string, challenge: Challenge, cred: RegistryCredential | undefined, scope: string, registry: string): Promise<string> {
    if (challenge.scheme === 'basic') {
      if (!cred) throw new RegistryError('unauthorized', `${registry} requires authentication and no pull secret matched it`, 401);
      return this.keep(key, basicAuthorization(cred), 24 * 3600);
    }
    if (challenge.scheme !== 'bearer' || !challenge.params.realm) {
      throw new RegistryError(
        'invalid response',
        `${registry} asked for ${challenge.scheme} authentication, which vkvm does not speak`,
        401,
      );
    }
    const realm = URL.canParse(challenge.params.realm) ? new URL(challenge.params.realm) : undefined;
    if (!realm || (realm.protocol !== 'https:' && realm.protocol !== 'http:'))
      throw new RegistryError('invalid response', `${registry} named token service ${challenge.params.realm}`);
    if (challenge.params.service) realm.searchParams.set('service', challenge.params.service);
    realm.searchParams.append('scope', challenge.params.scope ?? scope);
    const res = await this.http.get({
      url: realm,
      headers: cred ? { authorization: basicAuthorization(cred) } : {},
      idleTimeoutMs: this.idleTimeoutMs,
    });
    const body = await readSmall(res.body, 1 << 20);
    if (res.status === 401 || res.status === 403) {
      throw new RegistryError(
        'unauthorized',
        `the token service of ${registry} refused ${cred ? `the credentials from ${cred.from}` : 'an anonymous token'} (${res.status})`,
        res.status,
      );
    }
    if (res.status !== 200)
      throw new RegistryError('registry error', `the token service of ${registry} answered ${res.status}`, res.status);
    let doc: { token?: string; access_token?: string; expires_in?: number };
    try {
      doc = JSON.parse(body.toString('utf8')) as typeof doc;
    } catch {
      throw new RegistryError('invalid response', `the token service of ${registry} answered something other than JSON`);
    }
    const token = doc.token ?? doc.access_token;
    if (!token) throw new RegistryError('invalid response', `the token service of ${registry} sent no token`);
    return this.keep(key, `Bearer ${token}`, doc.expires_in && doc.expires_in > 0 ? doc.expires_in : DEFAULT_TOKEN_S);
  }

  private keep(key: string, authorization: string, lifetimeS: number): string {
    // Renewed a little early, so a token does not expire between a check and its use.
    this.tokens.set(key, { authorization, expiresAtMs: Date.now() + Math.max(1, lifetimeS - 5) * 1000 });
    return authorization;
  }
}

/** Reads a small body whole; more than `max` bytes is an invalid response. */
export async function readSmall(body: AsyncIterable<Buffer> & { destroy(): void }, max: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > max) {
      body.destroy();
      throw new RegistryError('invalid response', `a response larger than ${max} bytes where at most that was expected`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

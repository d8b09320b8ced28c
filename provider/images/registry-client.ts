// One repository on one registry, over the distribution API (/v2/): its
// manifests and blobs, authenticated on demand (auth.ts). TLS always, except
// for registries on loopback (127.0.0.0/8, ::1, localhost — as Docker allows
// by default) and those the operator lists, which may answer plain HTTP: for
// them HTTPS is tried first and HTTP used when TLS fails, as Docker does.
import ipaddr from 'ipaddr.js';
import { readSmall, TokenCache, parseChallenge } from './auth.js';
import { RegistryError } from './errors.js';
import type { HttpClient, HttpResponse } from './http.js';
import type { RegistryCredential } from './keyring.js';
import { MANIFEST_ACCEPT, MAX_MANIFEST_BYTES } from './manifest.js';
import { DOCKER_HUB, repositoryOf, type ImageReference } from './reference.js';

export interface RegistryAccess {
  http: HttpClient;
  tokens: TokenCache;
  /** Registries (host or host:port) the operator lets answer plain HTTP; loopback always may. */
  insecureRegistries: readonly string[];
  /** A request fails after this long without a byte. */
  idleTimeoutMs: number;
}

export interface FetchedManifest {
  body: Buffer;
  contentType?: string;
  /** The registry's Docker-Content-Digest header, checked against the body by the caller. */
  digestHeader?: string;
}

/** Docker Hub's API lives on another host than its name. */
const apiHost = (domain: string) => (domain === DOCKER_HUB ? 'registry-1.docker.io' : domain);

/** Whether `host` (as in a reference: name[:port] or [v6]:port) may be reached over plain HTTP. */
export function plainHttpAllowed(host: string, listed: readonly string[]): boolean {
  if (listed.includes(host)) return true;
  const name = host.replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1');
  if (listed.includes(name)) return true;
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  return ipaddr.isValid(name) && ipaddr.process(name).range() === 'loopback';
}

/** TLS failures that mean "this server speaks plain HTTP", as opposed to a refused or unreachable address. */
function tlsFailed(err: unknown): boolean {
  const code = ((err as Error).cause as { code?: string } | undefined)?.code ?? '';
  return code === 'EPROTO' || code === 'ECONNRESET' || code.startsWith('ERR_SSL');
}

/** Hosts found to answer plain HTTP, for this process's lifetime. */
const plainHttpHosts = new Set<string>();

export class RegistryClient {
  private readonly host: string;
  private readonly scope: string;
  private readonly authKey: string;

  constructor(
    private readonly ref: ImageReference,
    private readonly cred: RegistryCredential | undefined,
    private readonly access: RegistryAccess,
  ) {
    this.host = apiHost(ref.domain);
    this.scope = `repository:${ref.path}:pull`;
    this.authKey = `${this.host}|${this.scope}|${cred ? `${cred.from}|${cred.username}` : 'anonymous'}`;
  }

  /** The manifest or index `selector` (a tag or digest) names, at most MAX_MANIFEST_BYTES. */
  async manifest(selector: string): Promise<FetchedManifest> {
    const res = await this.request(`manifests/${selector}`, MANIFEST_ACCEPT);
    await this.check(res, `manifest ${selector}`);
    const length = Number(res.headers['content-length'] ?? 0);
    if (length > MAX_MANIFEST_BYTES) {
      res.body.destroy();
      throw new RegistryError(
        'invalid response',
        `the manifest of ${repositoryOf(this.ref)}:${selector} is ${length} bytes, more than the ${MAX_MANIFEST_BYTES} vkvm reads`,
      );
    }
    const body = await readSmall(res.body, MAX_MANIFEST_BYTES);
    const digestHeader = res.headers['docker-content-digest'];
    const contentType = res.headers['content-type'];
    return { body, ...(contentType ? { contentType } : {}), ...(typeof digestHeader === 'string' ? { digestHeader } : {}) };
  }

  /** A blob's bytes as a stream; the caller verifies them. */
  async blob(digest: string): Promise<HttpResponse> {
    const res = await this.request(`blobs/${digest}`);
    await this.check(res, `blob ${digest}`);
    return res;
  }

  private async request(path: string, accept?: string): Promise<HttpResponse> {
    const url = await this.url(path);
    const headers: Record<string, string> = { 'user-agent': 'vkvm', ...(accept ? { accept } : {}) };
    const cached = this.access.tokens.cached(this.authKey);
    if (cached) headers.authorization = cached;
    const res = await this.access.http.get({ url, headers, idleTimeoutMs: this.access.idleTimeoutMs });
    if (res.status !== 401) return res;
    const challenge = parseChallenge(String(res.headers['www-authenticate'] ?? ''));
    res.body.resume();
    if (!challenge) throw new RegistryError('unauthorized', `${this.ref.domain} answered 401 without saying how to authenticate`, 401);
    headers.authorization = await this.access.tokens.answer(this.authKey, challenge, this.cred, this.scope, this.ref.domain);
    return this.access.http.get({ url, headers, idleTimeoutMs: this.access.idleTimeoutMs });
  }

  /** The base URL's scheme: https, or http for a loopback or listed registry whose TLS handshake failed. */
  private async url(path: string): Promise<URL> {
    const https = new URL(`https://${this.host}/v2/${this.ref.path}/${path}`);
    if (!plainHttpAllowed(this.ref.domain, this.access.insecureRegistries)) return https;
    if (plainHttpHosts.has(this.host)) return new URL(`http://${this.host}/v2/${this.ref.path}/${path}`);
    try {
      const probe = await this.access.http.get({ url: new URL(`https://${this.host}/v2/`), idleTimeoutMs: this.access.idleTimeoutMs });
      probe.body.resume();
      return https;
    } catch (err) {
      if (!tlsFailed(err)) throw err;
      plainHttpHosts.add(this.host);
      return new URL(`http://${this.host}/v2/${this.ref.path}/${path}`);
    }
  }

  /** A non-200 answer as the error a user reads: the registry's own words when it gave any. */
  private async check(res: HttpResponse, what: string): Promise<void> {
    if (res.status === 200) return;
    const said = await readSmall(res.body, 64 << 10)
      .then((b) => (JSON.parse(b.toString('utf8')) as { errors?: Array<{ code?: string; message?: string }> }).errors?.[0])
      .catch(() => undefined);
    const detail = said?.message ? ` (${said.code ? `${said.code}: ` : ''}${said.message})` : '';
    const repo = repositoryOf(this.ref);
    switch (res.status) {
      case 401:
        throw new RegistryError(
          'unauthorized',
          this.cred
            ? `${this.ref.domain} refused the credentials from pull secret ${this.cred.from} for ${repo}${detail}`
            : `${this.ref.domain} requires authentication for ${repo} and no pull secret matched it${detail}`,
          401,
        );
      case 403:
        throw new RegistryError('denied', `${this.ref.domain} denied access to ${repo}${detail}`, 403);
      case 404:
        throw new RegistryError('not found', `${what} of ${repo} not found${detail}`, 404);
      case 429:
        throw new RegistryError('too many requests', `${this.ref.domain} is rate-limiting pulls${detail}`, 429);
      default:
        throw new RegistryError('registry error', `${this.ref.domain} answered ${res.status} for ${what} of ${repo}${detail}`, res.status);
    }
  }
}

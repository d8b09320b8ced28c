// Registry credentials from a pod's pull secrets, matched as the kubelet's
// keyring (pkg/credentialprovider: BasicDockerKeyring) matches them: a key is
// host[:port][/path] (a scheme and /v1/ or /v2/ are dropped), hosts may hold
// globs (*.example.com), the port must be equal and the path a prefix; every
// matching credential is returned, most specific key first, for the caller
// to try in turn. Docker Hub's legacy key (index.docker.io) serves docker.io
// images when nothing else matched. Pure.
import { ImagePullError } from './errors.js';

export interface RegistryCredential {
  username: string;
  password: string;
  /** The secret it came from (namespace/name), for logs; never the secret itself. */
  from: string;
}

/** A Secret as the API returns it (data base64-encoded). */
export interface PullSecret {
  namespace: string;
  name: string;
  type?: string;
  data?: Record<string, string>;
}

const DOCKER_HUB_KEY = 'index.docker.io';

interface ConfigEntry {
  username?: string;
  password?: string;
  auth?: string;
}

/** `https://` prefixed when schemeless, then parsed: what the kubelet's ParseSchemelessURL does. */
function schemeless(location: string): URL | undefined {
  const withScheme = /^https?:\/\//.test(location) ? location : `https://${location}`;
  return URL.canParse(withScheme) ? new URL(withScheme) : undefined;
}

function splitHost(url: URL): { parts: string[]; port: string } {
  return { parts: url.hostname.split('.'), port: url.port };
}

/** filepath.Match for one host label: `*` and `?` never cross a dot (labels are matched one by one). */
function globMatch(glob: string, label: string): boolean {
  const re = new RegExp(
    `^${glob
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );
  return re.test(label);
}

/** The kubelet's URLsMatch: same port, same number of host labels, each label matching, and the path a prefix. */
function urlsMatch(glob: URL, target: URL): boolean {
  const g = splitHost(glob);
  const t = splitHost(target);
  if (g.port !== t.port || g.parts.length !== t.parts.length) return false;
  if (!target.pathname.startsWith(glob.pathname === '/' ? '' : glob.pathname)) return false;
  return g.parts.every((part, i) => globMatch(part, t.parts[i]!));
}

/** Images the kubelet counts as Docker Hub's for the legacy key: no registry part, or docker.io / index.docker.io. */
function isDockerHub(image: string): boolean {
  const [first, rest] = image.split(/\/(.*)/s) as [string, string | undefined];
  if (!first) return false;
  if (rest === undefined) return true;
  return first === 'docker.io' || first === 'index.docker.io' || !/[.:]/.test(first);
}

export class DockerKeyring {
  private readonly creds = new Map<string, RegistryCredential[]>();

  /** Adds one entry of a docker config under `location` (a registry host, URL, or host/path). */
  add(location: string, cred: RegistryCredential): void {
    const parsed = schemeless(location);
    if (!parsed) return;
    // Docker treats /v1/ and /v2/ as the bare host (ResolveAuthConfig).
    let path = parsed.pathname;
    if (path.startsWith('/v2/') || path.startsWith('/v1/')) path = path.slice(3);
    const key = path && path !== '/' ? `${parsed.host}${path}` : parsed.host;
    this.creds.set(key, [...(this.creds.get(key) ?? []), cred]);
  }

  /** Every credential for `image` (a repository such as 127.0.0.1:5000/team/app), most specific key first. */
  lookup(image: string): RegistryCredential[] {
    const target = schemeless(image);
    // Reverse lexical order puts longer keys sharing a prefix first, as the kubelet sorts its index.
    const keys = [...this.creds.keys()].sort().reverse();
    const found = target ? keys.flatMap((k) => (urlsMatch(schemeless(k)!, target) ? this.creds.get(k)! : [])) : [];
    if (found.length) return found;
    return isDockerHub(image) ? (this.creds.get(DOCKER_HUB_KEY) ?? []) : [];
  }

  get size(): number {
    return this.creds.size;
  }
}

function decodeEntry(entry: ConfigEntry, from: string): RegistryCredential {
  if (entry.auth) {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) throw new Error(`an "auth" field in ${from} is not base64 of user:password`);
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1), from };
  }
  return { username: entry.username ?? '', password: entry.password ?? '', from };
}

/**
 * One keyring from a pod's pull secrets, in the order the pod lists them:
 * `kubernetes.io/dockerconfigjson` (.dockerconfigjson, {"auths": ...}) and the
 * legacy `kubernetes.io/dockercfg` (.dockercfg). Secrets of other types add
 * nothing, as in the kubelet; one that does not parse fails the pull.
 */
export function keyringFromSecrets(secrets: readonly PullSecret[]): DockerKeyring {
  const keyring = new DockerKeyring();
  for (const s of secrets) {
    const from = `${s.namespace}/${s.name}`;
    const field =
      s.type === 'kubernetes.io/dockerconfigjson' ? '.dockerconfigjson' : s.type === 'kubernetes.io/dockercfg' ? '.dockercfg' : undefined;
    const raw = field && s.data?.[field];
    if (!raw) continue;
    try {
      const doc = JSON.parse(Buffer.from(raw, 'base64').toString('utf8')) as { auths?: Record<string, ConfigEntry> } & Record<
        string,
        ConfigEntry
      >;
      const entries = field === '.dockerconfigjson' ? (doc.auths ?? {}) : doc;
      for (const [location, entry] of Object.entries(entries)) keyring.add(location, decodeEntry(entry ?? {}, from));
    } catch (err) {
      throw new ImagePullError('ErrImagePull', `pull secret ${from} does not hold a valid ${field} document: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
  return keyring;
}

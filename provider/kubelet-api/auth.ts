// Authenticates and authorizes every kubelet API request, as the kubelet does:
// a client certificate verified against the cluster CA, else a bearer token
// via TokenReview; then a SubjectAccessReview on nodes/<subresource>, or on
// the resource a route names (authorizeAs: a VMI's console).
// There is no anonymous or allow-all mode. Upgrade requests (exec, attach)
// pass through this same hook: upgrade.ts routes them through fastify.
import type { TLSSocket } from 'node:tls';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { LRUCache } from 'lru-cache';
import { ForbiddenError, UnauthorizedError } from './errors.js';

export interface UserInfo {
  username: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

export interface NodeAttributes {
  verb: string;
  subresource: 'proxy' | 'log' | 'stats' | 'metrics' | 'spec' | 'checkpoint';
}

/** A SubjectAccessReview's resourceAttributes. */
export interface ResourceAttributes {
  verb: string;
  group?: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}

/** The two API calls auth needs; the real ones come from the Kubernetes client. */
export interface AuthBackend {
  reviewToken(token: string): Promise<UserInfo | null>;
  authorize(user: UserInfo, attrs: ResourceAttributes): Promise<{ allowed: boolean; reason?: string }>;
}

declare module 'fastify' {
  interface FastifyRequest {
    user?: UserInfo;
  }
  interface FastifyContextConfig {
    /**
     * Authorizes the route's requests as these attributes instead of a node
     * subresource: for endpoints that act on one namespaced object (a VMI's
     * console), so the caller needs the same grant wherever it calls from.
     */
    authorizeAs?: (params: Record<string, string>, method: string) => ResourceAttributes;
  }
}

/**
 * The kubelet's mapping of URL paths to node subresources. The verb follows
 * the method, except on the endpoints that run commands or reach a console,
 * port or display (vkvm's /vnc): those are create whatever the method, since
 * WebSocket clients must use GET and `get nodes/proxy` is no grant to run
 * anything.
 */
export function nodeAttributes(method: string, path: string): NodeAttributes {
  const verbs: Record<string, string> = { GET: 'get', HEAD: 'get', POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' };
  const under = (p: string) => path === p || path.startsWith(p + '/');
  const streaming = ['/exec', '/attach', '/portForward', '/run', '/vnc'].some(under);
  const verb = streaming ? 'create' : (verbs[method] ?? method.toLowerCase());
  const subresource: NodeAttributes['subresource'] = under('/stats')
    ? 'stats'
    : under('/metrics')
      ? 'metrics'
      : under('/logs')
        ? 'log'
        : under('/spec')
          ? 'spec'
          : under('/checkpoint')
            ? 'checkpoint'
            : 'proxy';
  return { verb, subresource };
}

function userFromCertificate(req: FastifyRequest): UserInfo | null | 'invalid' {
  const socket = req.raw.socket as TLSSocket;
  if (typeof socket.getPeerCertificate !== 'function') return null;
  const cert = socket.getPeerCertificate();
  if (!cert || Object.keys(cert).length === 0) return null;
  if (!socket.authorized) return 'invalid';
  const org = cert.subject?.O;
  const cn = cert.subject?.CN;
  if (!cn) return 'invalid';
  return { username: Array.isArray(cn) ? cn[0]! : cn, groups: org === undefined ? [] : Array.isArray(org) ? org : [org] };
}

/**
 * A cached decision is found again only by a request that would send the same
 * SubjectAccessReview: the key is everything authorize() is given (username,
 * uid, groups, extra and the resource attributes), so users who share a name
 * but not a uid, groups or extra never share a decision. Object keys are
 * sorted: one user's extra is one key whatever order a TokenReview lists it in.
 */
function decisionKey(user: UserInfo, review: ResourceAttributes): string {
  return JSON.stringify({ user, review }, (_key, value: unknown) =>
    value !== null && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : value,
  );
}

export interface AuthOptions {
  nodeName: string;
  backend: AuthBackend;
  /** Paths served without authentication (none on the kubelet port). */
  publicPaths?: string[];
}

async function authPlugin(app: FastifyInstance, opts: AuthOptions): Promise<void> {
  // Cache TTLs follow the kubelet's webhook defaults: 2 min for tokens,
  // 5 min for allowed and 30 s for denied decisions.
  const tokens = new LRUCache<string, UserInfo | false>({ max: 1024, ttl: 2 * 60_000 });
  const decisions = new LRUCache<string, { allowed: boolean; reason?: string }>({ max: 4096, ttl: 5 * 60_000 });
  const publicPaths = new Set(opts.publicPaths ?? []);

  app.addHook('onRequest', async (req) => {
    // The route pattern the router matched, not the raw URL: the router decodes
    // %XX before matching, so `/%61ttach/…` must be authorized as the attach it runs.
    const path = req.routeOptions.url ?? req.url.split('?')[0] ?? '/';
    if (publicPaths.has(path)) return;
    let user: UserInfo | null = null;
    const fromCert = userFromCertificate(req);
    if (fromCert === 'invalid') throw new UnauthorizedError('client certificate not signed by the cluster CA');
    if (fromCert) user = fromCert;
    else {
      const m = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '');
      if (m?.[1]) {
        let cached = tokens.get(m[1]);
        if (cached === undefined) {
          cached = (await opts.backend.reviewToken(m[1])) ?? false;
          tokens.set(m[1], cached);
        }
        if (cached) user = cached;
      }
    }
    if (!user) throw new UnauthorizedError();
    const authorizeAs = req.routeOptions.config.authorizeAs;
    const review: ResourceAttributes = authorizeAs
      ? authorizeAs(req.params as Record<string, string>, req.method)
      : { ...nodeAttributes(req.method, path), resource: 'nodes', name: opts.nodeName };
    const key = decisionKey(user, review);
    let decision = decisions.get(key);
    if (!decision) {
      decision = await opts.backend.authorize(user, review);
      decisions.set(key, decision, { ttl: decision.allowed ? 5 * 60_000 : 30_000 });
    }
    if (!decision.allowed) {
      const where = review.namespace ? `, namespace=${review.namespace}` : '';
      throw new ForbiddenError(
        `Forbidden (user=${user.username}, verb=${review.verb}, resource=${review.resource}, subresource=${review.subresource ?? ''}${where})${decision.reason ? `: ${decision.reason}` : ''}`,
      );
    }
    req.user = user;
  });
}

export const auth = fp(authPlugin, { name: 'vkvm-auth' });

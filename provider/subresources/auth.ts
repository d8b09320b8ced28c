// Authentication and authorization of every subresource request, as an
// aggregated API server does it: the kube-apiserver (the aggregator) has
// already authenticated the user and proxies with its front-proxy client
// certificate plus X-Remote-User / X-Remote-Group / X-Remote-Extra-*
// headers. The headers count only on a connection whose certificate chains to
// the requestheader client CA and names an allowed proxy; anything else is
// 401. Then a SubjectAccessReview on the route's resource and subresource in
// group subresources.kubevirt.io (GET → get, PUT → update, as KubeVirt's
// authorizer maps them). Admission webhook routes need the same certificate,
// and no headers: their caller is the kube-apiserver, which authorized the
// request under review. There is no anonymous or allow-all mode.
import type { TLSSocket } from 'node:tls';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { UserInfo } from '../kubelet-api/auth.js';
import { forbidden, unauthorized } from './errors.js';

export const GROUP = 'subresources.kubevirt.io';
export const VERSION = 'v1';

/** What the aggregator's certificate and headers look like (kube-system/extension-apiserver-authentication). */
export interface RequestHeaderConfig {
  clientCaPem: string;
  /** Common names a proxy certificate may carry; empty admits any the CA signed. */
  allowedNames: string[];
  usernameHeaders: string[];
  groupHeaders: string[];
  extraHeaderPrefixes: string[];
}

export interface ResourceAttributes {
  namespace: string;
  verb: string;
  /** virtualmachines, virtualmachineinstances, or a namespaced action of its own (expand-vm-spec). */
  resource: string;
  /** Absent for a resource that is the action itself. */
  subresource?: string;
  /** Absent for a request on no one object. */
  name?: string;
}

export interface Authorizer {
  authorize(user: UserInfo, attrs: ResourceAttributes): Promise<{ allowed: boolean; reason?: string }>;
}

/** Set on every namespaced route; routes without it (discovery, version) need only authentication. */
export interface RouteAuthorization {
  resource: string;
  subresource?: string;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    authorize?: RouteAuthorization;
    /**
     * An admission webhook: its caller is the kube-apiserver itself, which has
     * already authorized the request under review and presents the proxy's
     * certificate (its AdmissionConfiguration's webhook kubeconfig), without
     * user headers.
     */
    webhook?: true;
  }
}

const VERBS: Readonly<Record<string, string>> = {
  GET: 'get',
  HEAD: 'get',
  PUT: 'update',
  POST: 'create',
  PATCH: 'patch',
  DELETE: 'delete',
};

/** The proxy's common name, if the connection carries a certificate the requestheader CA signed. */
function proxyName(req: FastifyRequest): string | undefined {
  const socket = req.raw.socket as TLSSocket;
  if (typeof socket.getPeerCertificate !== 'function' || !socket.authorized) return undefined;
  const cn = socket.getPeerCertificate()?.subject?.CN;
  return Array.isArray(cn) ? cn[0] : cn;
}

/** The user the aggregator vouches for, from the configured headers (repeated headers are kept apart). */
export function userFromHeaders(headers: Record<string, string[] | undefined>, config: RequestHeaderConfig): UserInfo | undefined {
  const first = (names: string[]) => names.map((n) => headers[n.toLowerCase()]).find((v) => v !== undefined && v.length > 0);
  const username = first(config.usernameHeaders)?.[0];
  if (!username) return undefined;
  const groups = first(config.groupHeaders) ?? [];
  const extra: Record<string, string[]> = {};
  for (const prefix of config.extraHeaderPrefixes.map((p) => p.toLowerCase())) {
    for (const [name, values] of Object.entries(headers)) {
      if (!name.startsWith(prefix) || name.length === prefix.length || !values) continue;
      // Keys are percent-encoded by the aggregator (they may hold '/' and other characters headers cannot).
      let key = name.slice(prefix.length);
      try {
        key = decodeURIComponent(key);
      } catch {
        // kept as sent
      }
      extra[key] = [...(extra[key] ?? []), ...values];
    }
  }
  return { username, groups, extra };
}

export interface AuthOptions {
  requestHeader: RequestHeaderConfig;
  authorizer: Authorizer;
  /** Served to anyone (liveness probes). */
  publicPaths: string[];
}

async function authPlugin(app: FastifyInstance, opts: AuthOptions): Promise<void> {
  const publicPaths = new Set(opts.publicPaths);
  const allowed = new Set(opts.requestHeader.allowedNames);
  app.addHook('onRequest', async (req) => {
    const path = req.routeOptions.url ?? req.url.split('?')[0] ?? '/';
    if (publicPaths.has(path)) return;
    const proxy = proxyName(req);
    if (proxy === undefined) throw unauthorized('Unauthorized: no client certificate signed by the requestheader client CA');
    if (allowed.size > 0 && !allowed.has(proxy))
      throw unauthorized(`Unauthorized: client certificate ${JSON.stringify(proxy)} is not an allowed front proxy`);
    if (req.routeOptions.config.webhook) return;
    const user = userFromHeaders(req.raw.headersDistinct, opts.requestHeader);
    if (!user) throw unauthorized('Unauthorized: no user in the request headers');
    req.user = user;
    const route = req.routeOptions.config.authorize;
    if (!route) return;
    const params = req.params as { namespace: string; name?: string };
    const attrs: ResourceAttributes = {
      namespace: params.namespace,
      ...(params.name ? { name: params.name } : {}),
      verb: VERBS[req.method] ?? req.method.toLowerCase(),
      ...route,
    };
    const decision = await opts.authorizer.authorize(user, attrs);
    if (!decision.allowed) {
      // Worded as kube-apiserver words RBAC's refusals.
      const object = `${attrs.resource}.${GROUP}${attrs.name ? ` "${attrs.name}"` : ''}`;
      const resource = attrs.subresource ? `${attrs.resource}/${attrs.subresource}` : attrs.resource;
      throw forbidden(
        `${object} is forbidden: User "${user.username}" cannot ${attrs.verb} resource "${resource}" in API group "${GROUP}" in the namespace "${attrs.namespace}"${decision.reason ? `: ${decision.reason}` : ''}`,
      );
    }
  });
}

export const subresourceAuth = fp(authPlugin, { name: 'subresource-auth' });

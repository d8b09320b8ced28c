// The HTTP(S) requests of registry pulls: keep-alive connections (an image is
// many requests to one registry), redirects followed by hand so credentials
// never travel to another origin (blob storage behind a redirect gets none)
// and never from https down to http, and a time limit on silence rather than
// on the whole transfer (a 20 GiB disk takes as long as it takes). Where a
// request may lead is the node's download policy (vmm/disks/download-policy.ts),
// as for image URLs: every address checked on every hop, the connection made
// to the address checked. Only the hosts a request names as node-local (the
// operator's local registries) may be on the node, each in its own
// connection pool, so no other request reuses their sockets.
import http, { type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { rootCertificates } from 'node:tls';
import { AddressRefusedError, guardedLookup, refusalOf, type DownloadPolicy } from '../../vmm/disks/download-policy.js';
import { RegistryError } from './errors.js';

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: IncomingMessage;
  /** Where the answer came from, after redirects. */
  url: URL;
}

export interface HttpRequest {
  url: URL;
  method?: 'GET' | 'HEAD';
  headers?: Record<string, string>;
  /** The request fails after this long without a byte (connect, headers or body). */
  idleTimeoutMs: number;
  /** Hosts (URL.host: name or [v6] with :port) of this request that may be on the node; a redirect elsewhere gets no such leave. */
  nodeLocalHosts?: readonly string[];
}

const MAX_REDIRECTS = 10;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Errors of the connection itself (not of an HTTP answer): the registry is unreachable, or its address refused. */
function connectionError(url: URL, err: Error & { code?: string }): RegistryError {
  if (err instanceof AddressRefusedError) {
    return new RegistryError(
      'refused',
      `${url.host}: ${err.message}; registries may not be on the node, its local services or link-local addresses unless the operator lists them`,
      undefined,
      { cause: err },
    );
  }
  return new RegistryError('unreachable', `${url.host}: ${err.code ? `${err.code} ` : ''}${err.message}`, undefined, { cause: err });
}

interface Pool {
  http: http.Agent;
  https: https.Agent;
}

export class HttpClient {
  private readonly remote: Pool;
  private readonly local: Pool;

  /** `ca`: PEM certificates trusted besides Node's own roots (a private registry's CA); `addresses`: where requests may lead. */
  constructor(
    private readonly addresses: DownloadPolicy,
    ca: readonly string[] = [],
  ) {
    // A private CA extends Node's roots rather than replacing them.
    const tls = ca.length ? { ca: [...rootCertificates, ...ca] } : {};
    const pool = (): Pool => ({
      http: new http.Agent({ keepAlive: true, maxSockets: 16 }),
      https: new https.Agent({ keepAlive: true, maxSockets: 16, ...tls }),
    });
    this.remote = pool();
    this.local = pool();
  }

  /** `req.url`, following redirects; the caller consumes or destroys the body. */
  async get(req: HttpRequest): Promise<HttpResponse> {
    let url = req.url;
    let headers = { ...req.headers };
    for (let hop = 0; ; hop++) {
      const res = await this.once(url, headers, req);
      const location = res.headers.location;
      if (!REDIRECTS.has(res.statusCode ?? 0) || !location) return { status: res.statusCode ?? 0, headers: res.headers, body: res, url };
      res.resume();
      if (hop >= MAX_REDIRECTS) throw new RegistryError('invalid response', `${req.url.host}: more than ${MAX_REDIRECTS} redirects`);
      const next = new URL(location, url);
      if (next.protocol !== 'https:' && next.protocol !== 'http:')
        throw new RegistryError('invalid response', `${url.host} redirected to ${next.protocol} URL`);
      if (url.protocol === 'https:' && next.protocol === 'http:')
        throw new RegistryError('invalid response', `${url.host} redirected from https to plain http (${next.host})`);
      if (next.origin !== url.origin) {
        const { authorization: _dropped, ...rest } = headers;
        headers = rest;
      }
      url = next;
    }
  }

  private once(url: URL, headers: Record<string, string>, req: HttpRequest): Promise<IncomingMessage> {
    const tls = url.protocol === 'https:';
    const except = { nodeLocal: !!req.nodeLocalHosts?.includes(url.host) };
    const pool = except.nodeLocal ? this.local : this.remote;
    // A literal address is never looked up, so it is checked here.
    const literal = url.hostname.replace(/^\[(.*)\]$/, '$1');
    const refused = isIP(literal) ? refusalOf(literal, this.addresses, except) : undefined;
    if (refused) return Promise.reject(connectionError(url, new AddressRefusedError(refused)));
    return new Promise((resolve, reject) => {
      const request = (tls ? https : http).request(
        url,
        {
          method: req.method ?? 'GET',
          headers,
          agent: tls ? pool.https : pool.http,
          lookup: guardedLookup(this.addresses, except),
        },
        (res) => {
          // Silence while the body streams fails the body, which the reader sees as an error.
          res.on('error', () => undefined);
          resolve(res);
        },
      );
      request.setTimeout(req.idleTimeoutMs, () =>
        request.destroy(Object.assign(new Error(`no data for ${Math.round(req.idleTimeoutMs / 1000)} s`), { code: 'ETIMEDOUT' })),
      );
      request.on('error', (err) => reject(connectionError(url, err)));
      request.end();
    });
  }

  close(): void {
    for (const pool of [this.remote, this.local]) {
      pool.http.destroy();
      pool.https.destroy();
    }
  }
}

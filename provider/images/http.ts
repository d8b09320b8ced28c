// The HTTP(S) requests of registry pulls: keep-alive connections (an image is
// many requests to one registry), redirects followed by hand so credentials
// never travel to another origin (blob storage behind a redirect gets none)
// and never from https down to http, and a time limit on silence rather than
// on the whole transfer (a 20 GiB disk takes as long as it takes).
import http, { type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import https from 'node:https';
import { rootCertificates } from 'node:tls';
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
  headers?: Record<string, string>;
  /** The request fails after this long without a byte (connect, headers or body). */
  idleTimeoutMs: number;
}

const MAX_REDIRECTS = 10;
const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Errors of the connection itself (not of an HTTP answer): the registry is unreachable. */
function unreachable(url: URL, err: Error & { code?: string }): RegistryError {
  return new RegistryError('unreachable', `${url.host}: ${err.code ? `${err.code} ` : ''}${err.message}`, undefined, { cause: err });
}

export class HttpClient {
  private readonly httpAgent = new http.Agent({ keepAlive: true, maxSockets: 16 });
  private readonly httpsAgent: https.Agent;

  /** `ca`: PEM certificates trusted besides Node's own roots (a private registry's CA). */
  constructor(ca: readonly string[] = []) {
    // A private CA extends Node's roots rather than replacing them.
    this.httpsAgent = new https.Agent({ keepAlive: true, maxSockets: 16, ...(ca.length ? { ca: [...rootCertificates, ...ca] } : {}) });
  }

  /** GET `req.url`, following redirects; the caller consumes or destroys the body. */
  async get(req: HttpRequest): Promise<HttpResponse> {
    let url = req.url;
    let headers = { ...req.headers };
    for (let hop = 0; ; hop++) {
      const res = await this.once(url, headers, req.idleTimeoutMs);
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

  private once(url: URL, headers: Record<string, string>, idleTimeoutMs: number): Promise<IncomingMessage> {
    const tls = url.protocol === 'https:';
    return new Promise((resolve, reject) => {
      const req = (tls ? https : http).request(url, { method: 'GET', headers, agent: tls ? this.httpsAgent : this.httpAgent }, (res) => {
        // Silence while the body streams fails the body, which the reader sees as an error.
        res.on('error', () => undefined);
        resolve(res);
      });
      req.setTimeout(idleTimeoutMs, () =>
        req.destroy(Object.assign(new Error(`no data for ${Math.round(idleTimeoutMs / 1000)} s`), { code: 'ETIMEDOUT' })),
      );
      req.on('error', (err) => reject(unreachable(url, err)));
      req.end();
    });
  }

  close(): void {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }
}

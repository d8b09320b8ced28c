// The way from the subresource API to a VMI's node, for what only the node
// can do (a console, the guest agent's lists, a reboot): the node's kubelet
// API at the same VMI subresource path (provider/kubelet-api/routes/
// vmi-subresources.ts), called with this process's own credentials, which the
// node authorizes by SubjectAccessReview for that VMI subresource. No second
// node port, and no nodes/proxy grant. The node is dialled at the address its
// Node object reports (InternalIP first) and the kubelet port it advertises;
// its serving certificate is verified against the cluster CA.
//
// Upgrades are proxied as kube-apiserver proxies them, and as virt-api's raw
// streamer does with virt-handler: the client's WebSocket handshake goes to
// the node, the node's 101 goes back, and the two connections are then
// spliced byte for byte. The subprotocol and framing are the node's; nothing
// here parses a frame, so any stream the node serves (console, VNC, a guest
// port) passes the same way.
import { request, type RequestOptions } from 'node:https';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import type { Upgrade } from '../kubelet-api/upgrade.js';
import { GROUP, VERSION } from './auth.js';
import { StatusError, type StatusReason } from './errors.js';

export interface VmiNodeTarget {
  /** The node the VMI runs on (status.nodeName). */
  node: string;
  namespace: string;
  name: string;
  /** The subresource path under the VMI: "console", "userlist", "portforward/22/tcp". */
  subresource: string;
  /** A query string to pass on, without "?". */
  query?: string;
}

/** A node's answer to a forwarded upgrade: its 101 response head and the connection after it. */
export interface NodeUpgrade {
  responseHead: string;
  socket: Duplex;
  head: Buffer;
}

/** How long the node has to answer (KubeVirt gives virt-handler 10 s). */
const NODE_TIMEOUT_MS = 10_000;
/** The handshake headers a WebSocket upgrade carries to the node; extensions are not offered, so frames pass unchanged. */
const UPGRADE_HEADERS = ['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-protocol'];

const NODE_REASONS: Readonly<Record<number, StatusReason>> = {
  400: 'BadRequest',
  404: 'NotFound',
  409: 'Conflict',
  503: 'ServiceUnavailable',
};

/** The kubelet endpoint of a Node, as kube-apiserver picks it: InternalIP, else ExternalIP, else Hostname. */
export function kubeletEndpoint(node: V1Node): { host: string; port: number } {
  const addresses = node.status?.addresses ?? [];
  const host = ['InternalIP', 'ExternalIP', 'Hostname'].map((type) => addresses.find((a) => a.type === type)?.address).find(Boolean);
  const port = node.status?.daemonEndpoints?.kubeletEndpoint?.Port;
  if (!host || !port)
    throw new StatusError('InternalError', `Internal error occurred: node ${node.metadata?.name} reports no kubelet endpoint`);
  return { host, port };
}

/** The node's refusal as the subresource API answers it: the node's own message, its code where the client can act on it. */
export function nodeRefusal(target: VmiNodeTarget, status: number, body: string): StatusError {
  let message = body.trim();
  try {
    message = (JSON.parse(message) as { message?: string }).message ?? message;
  } catch {
    // a text body is the message
  }
  const reason = NODE_REASONS[status];
  if (reason) return new StatusError(reason, message);
  return new StatusError(
    'InternalError',
    `Internal error occurred: node ${target.node} answered ${status} for ${target.subresource}: ${message}`,
  );
}

const readBody = (res: IncomingMessage): Promise<string> =>
  new Promise((resolve) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => (body = (body + chunk).slice(0, 64 * 1024)));
    res.on('end', () => resolve(body));
    res.on('error', () => resolve(body));
  });

export class VmiNodeClient {
  constructor(
    private readonly kc: KubeConfig,
    private readonly readNode: (name: string) => Promise<V1Node>,
  ) {}

  /** A plain request; resolves with the node's JSON answer (undefined when empty), rejects with its refusal. */
  async request(target: VmiNodeTarget, method: 'GET' | 'PUT'): Promise<unknown> {
    const options = await this.options(target, method, {});
    return new Promise((resolve, reject) => {
      const req = request(options, (res) => {
        void readBody(res).then((body) => {
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) return reject(nodeRefusal(target, status, body));
          try {
            resolve(body ? JSON.parse(body) : undefined);
          } catch (err) {
            reject(
              new StatusError('InternalError', `Internal error occurred: node ${target.node} answered no JSON`, undefined, { cause: err }),
            );
          }
        });
      });
      this.failOn(req, target, reject);
      req.end();
    });
  }

  /** Forwards the client's WebSocket upgrade to the node; resolves once the node switched protocols. */
  async upgrade(target: VmiNodeTarget, client: IncomingMessage): Promise<NodeUpgrade> {
    const headers: Record<string, string> = { Connection: 'Upgrade', Upgrade: 'websocket' };
    for (const name of UPGRADE_HEADERS) {
      const value = client.headers[name];
      if (typeof value === 'string') headers[name] = value;
    }
    const options = await this.options(target, 'GET', headers);
    return new Promise((resolve, reject) => {
      const req = request(options);
      req.on('upgrade', (res, socket, head) => {
        socket.setTimeout(0);
        const lines = [`HTTP/1.1 101 ${res.statusMessage ?? 'Switching Protocols'}`];
        for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) lines.push(`${res.rawHeaders[i]}: ${res.rawHeaders[i + 1]}`);
        resolve({ responseHead: `${lines.join('\r\n')}\r\n\r\n`, socket, head });
      });
      req.on('response', (res) => void readBody(res).then((body) => reject(nodeRefusal(target, res.statusCode ?? 0, body))));
      this.failOn(req, target, reject);
      req.end();
    });
  }

  private async options(target: VmiNodeTarget, method: string, headers: Record<string, string>): Promise<RequestOptions> {
    const node = await this.readNode(target.node).catch((err: unknown) => {
      throw new StatusError('InternalError', `Internal error occurred: reading node ${target.node}: ${(err as Error).message}`, undefined, {
        cause: err,
      });
    });
    const { host, port } = kubeletEndpoint(node);
    const seg = encodeURIComponent;
    const path = `/apis/${GROUP}/${VERSION}/namespaces/${seg(target.namespace)}/virtualmachineinstances/${seg(target.name)}/${target.subresource}`;
    const options: RequestOptions = {
      host,
      port,
      method,
      path: target.query ? `${path}?${target.query}` : path,
      headers,
      timeout: NODE_TIMEOUT_MS,
    };
    // The cluster CA, and this process's client certificate or bearer token.
    await this.kc.applyToHTTPSOptions(options);
    return options;
  }

  private failOn(req: ReturnType<typeof request>, target: VmiNodeTarget, reject: (err: StatusError) => void): void {
    req.on('timeout', () => req.destroy(new Error(`no answer within ${NODE_TIMEOUT_MS} ms`)));
    req.on('error', (err) =>
      reject(
        new StatusError('InternalError', `Internal error occurred: cannot reach node ${target.node}: ${err.message}`, undefined, {
          cause: err,
        }),
      ),
    );
  }
}

/**
 * Answers the client with the node's 101 and splices the two connections
 * until either closes; resolves when both are closed.
 */
export function spliceUpgrade(client: Upgrade, node: NodeUpgrade): Promise<void> {
  return new Promise((resolve) => {
    client.socket.write(node.responseHead);
    if (node.head.length > 0) client.socket.write(node.head);
    if (client.head.length > 0) node.socket.write(client.head);
    client.socket.pipe(node.socket);
    node.socket.pipe(client.socket);
    let open = 2;
    const closed = (): void => {
      client.socket.destroy();
      node.socket.destroy();
      if (--open === 0) resolve();
    };
    client.socket.once('close', closed);
    node.socket.once('close', closed);
    client.socket.on('error', () => client.socket.destroy());
    node.socket.on('error', () => node.socket.destroy());
  });
}

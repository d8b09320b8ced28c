// The way from this server to a VM's serial console: the node's kubelet API
// attach endpoint on the VMI's launcher pod, reached through the
// kube-apiserver's node proxy (nodes/NODE/proxy/attach/…) with this process's
// own credentials. So no second node port exists, and the node authorizes the
// apiserver as for any `kubectl attach`. Spoken as a v4.channel.k8s.io
// WebSocket: the first byte of each message is its channel.
import type { KubeConfig } from '@kubernetes/client-node';
import WebSocket from 'ws';
import { StatusError } from './errors.js';

export interface ConsoleTarget {
  node: string;
  namespace: string;
  pod: string;
  container: string;
}

/** The channel protocol's numbers (k8s.io/apimachinery wsstream). */
export const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, error: 3 } as const;

export type ConsoleDialer = (target: ConsoleTarget) => Promise<WebSocket>;

export function nodeProxyConsoleDialer(kc: KubeConfig): ConsoleDialer {
  return async ({ node, namespace, pod, container }) => {
    const server = new URL(kc.getCurrentCluster()!.server);
    const seg = encodeURIComponent;
    const url = new URL(`${server.pathname.replace(/\/$/, '')}/api/v1/nodes/${seg(node)}/proxy/attach/${seg(namespace)}/${seg(pod)}/${seg(container)}`, server);
    url.protocol = url.protocol === 'http:' ? 'ws:' : 'wss:';
    url.search = 'input=1&output=1&tty=1';
    const options: WebSocket.ClientOptions = {};
    await kc.applyToHTTPSOptions(options);
    const ws = new WebSocket(url, ['v4.channel.k8s.io'], options);
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve(ws));
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
        res.on('end', () => reject(new StatusError('InternalError', `Internal error occurred: the node's console answered ${res.statusCode}: ${body.trim()}`)));
      });
      ws.once('error', (err) => reject(new StatusError('InternalError', `Internal error occurred: cannot reach the node's console: ${err.message}`, undefined, { cause: err })));
    });
  };
}

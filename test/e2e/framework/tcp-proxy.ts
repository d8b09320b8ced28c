// A TCP proxy between a node agent and the API server, for faults a healthy
// loopback never shows: freeze() makes every connection open at that moment
// half-open (both ends stay connected, not one more byte passes), while new
// connections pass as before. TLS goes through untouched.
import net from 'node:net';
import { writeFile } from 'node:fs/promises';
import { KubeConfig } from '@kubernetes/client-node';
import type { Test } from 'tap';

export interface TcpProxy {
  port: number;
  /** Connections accepted so far. */
  accepted(): number;
  /** From now on the connections open now pass nothing; returns how many there were. */
  freeze(): number;
}

export async function startTcpProxy(t: Test, target: { host: string; port: number }): Promise<TcpProxy> {
  const open = new Set<{ client: net.Socket; upstream: net.Socket; frozen: boolean }>();
  let accepted = 0;
  const server = net.createServer((client) => {
    accepted++;
    const upstream = net.connect(target.port, target.host);
    const conn = { client, upstream, frozen: false };
    open.add(conn);
    // Bytes of a frozen connection are read and dropped, so neither end sees back-pressure or a close.
    client.on('data', (d) => conn.frozen || upstream.write(d));
    upstream.on('data', (d) => conn.frozen || client.write(d));
    const end = () => {
      open.delete(conn);
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', () => conn.frozen || end());
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const c of open) {
      c.client.destroy();
      c.upstream.destroy();
    }
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    accepted: () => accepted,
    freeze: () => {
      for (const c of open) c.frozen = true;
      return open.size;
    },
  };
}

/** Where a kubeconfig's current cluster is. */
export function apiServerOf(kubeconfigPath: string): { host: string; port: number } {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const server = new URL(kc.getCurrentCluster()!.server);
  return { host: server.hostname, port: Number(server.port) };
}

/** Writes a copy of `kubeconfigPath` whose cluster is reached through `proxy` (the API server's certificate names 127.0.0.1). */
export async function writeKubeconfigVia(kubeconfigPath: string, proxy: TcpProxy, outPath: string): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath);
  const current = kc.getCurrentCluster()!;
  kc.clusters = kc.clusters.map((c) => (c.name === current.name ? { ...c, server: `https://127.0.0.1:${proxy.port}` } : c));
  await writeFile(outPath, kc.exportConfig(), { mode: 0o600 });
}

// `vkvm up`'s cluster DNS (see cluster-dns-config.ts): CoreDNS, built with
// the control plane, started beside it on node 1's InternalIP, and the
// kube-dns Service and EndpointSlice that put it behind 10.96.0.10. It dies
// with vkvm up however vkvm up dies; stop() ends it.
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import type { KubernetesObject } from '@kubernetes/client-node';
import { freePort } from '../../deploy/cluster/cluster.js';
import { applyManifests } from '../kube/apply.js';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { kubeDnsObjects, localCorefile } from './cluster-dns-config.js';
import { awaitServiceReady, spawnHostService } from './host-service.js';

const READY_TIMEOUT_MS = 60_000;

export interface LocalDnsStart {
  coredns: string;
  /** Node 1's InternalIP. */
  address: string;
  adminKubeconfig: string;
  domain: string;
  /** Its Corefile and log: <state-dir>/cluster-dns, removed on stop. */
  dir: string;
  clients: KubeClients;
  log: Logger;
}

export interface RunningLocalDns {
  stop(): Promise<void>;
}

/** 200 from CoreDNS's ready plugin: every plugin that reports readiness (the Kubernetes one: synced) is ready. */
function isReady(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/ready', timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

export async function startLocalDns(o: LocalDnsStart): Promise<RunningLocalDns> {
  await mkdir(o.dir, { recursive: true, mode: 0o700 });
  const readyPort = await freePort();
  const corefile = join(o.dir, 'Corefile');
  await writeFile(corefile, localCorefile({ address: o.address, kubeconfig: o.adminKubeconfig, readyPort, domain: o.domain }));
  const logFile = join(o.dir, 'coredns.log');
  const child = spawnHostService([o.coredns, '-conf', corefile], logFile);
  const stop = async () => {
    await child.stop();
    await rm(o.dir, { recursive: true, force: true });
  };
  try {
    const start = await awaitServiceReady(child, {
      what: 'CoreDNS',
      logFile,
      timeoutMs: READY_TIMEOUT_MS,
      intervalMs: 250,
      probe: async () => ({ ready: await isReady(readyPort) }),
    });
    // Its directory goes with the failed start: the error carries the log's end.
    if (start.kind === 'exited') throw new Error(`CoreDNS exited (${start.why}):\n${start.logTail}`);
    await applyManifests(o.clients, kubeDnsObjects(o.address) as KubernetesObject[]);
  } catch (err) {
    await stop();
    throw err;
  }
  o.log.info({ address: o.address, pid: child.pid }, 'cluster DNS (CoreDNS) serves kube-system/kube-dns');
  return { stop };
}

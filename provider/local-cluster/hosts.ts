// This host's side of nodes 2..N of `vkvm up --nodes N`: a join token made
// as an operator makes one (`vkvm token create`), each node's namespace on
// the segment, its test guest images, and its init process
// (simulated-host.ts) started and, on stop, stopped before its namespace
// goes. Nodes of an earlier, larger run are removed.
import { spawn } from 'node:child_process';
import { readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Cgroup } from '../../launcher/agent-api.js';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { cliPath } from '../join/service.js';
import { readJoinRecord } from '../join/join.js';
import { NETNS_DIR } from '../network/vm-network.js';
import { run } from '../network/host.js';
import { imageStoreOf, NODES_CGROUP_PARENT, NODES_DIR, type LocalNode, type Segment } from './layout.js';
import { createNodeNetns } from './segment.js';
import { startHostInit, stopHostInit, type StartedHost } from './host-init.js';
import { cgroupMounts } from './cgroup-mounts.js';
import { JOINED_MESSAGE, type SimulatedHostSpec } from './host-spec.js';
import type { NodeStorageOf } from '../node-storage/node-storage-spec.js';

export interface LocalNodesOptions {
  nodes: LocalNode[];
  segment: Segment;
  /** The admin kubeconfig `vkvm token create` runs with. */
  adminKubeconfig: string;
  /** The API server URL as the nodes reach it. */
  server: string;
  /** Node agent flags every node gets. */
  agentArgs: string[];
  /** Node 1's directories, hidden from the simulated hosts. */
  hidden: string[];
  /** Directories inside hidden ones the hosts see again, read-only (the control plane's binaries, whose kube-proxy they run). */
  shared: string[];
  /** Puts the test guest images in a node's image store before it starts. */
  importImages: (imageStoreDir: string) => Promise<void>;
  gracePeriodS: number;
  logLevel: string;
  /** Each node's CSI driver and provisioner, if it is to run them. */
  storageOf?: NodeStorageOf;
  log: Logger;
}

export interface RunningLocalNodes {
  /** Stops every node (its VMs and network), then removes its namespace. */
  stop(): Promise<void>;
}

const SIMULATED_HOST = new URL('./simulated-host.js', import.meta.url).pathname;

/** `vkvm token create`, as an operator runs it; the printed `vkvm join` command's arguments. */
async function joinArgs(o: LocalNodesOptions): Promise<string[]> {
  const args = [cliPath(), 'token', 'create', `--kubeconfig=${o.adminKubeconfig}`, `--server=${o.server}`, '--ttl=1h'];
  const child = spawn(process.execPath, [...args, '--description=vkvm up --nodes'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const command = stdout.split('\n').find((l) => l.startsWith('vkvm join '));
  if (code !== 0 || !command) throw new Error(`vkvm token create failed (${code}): ${stderr.trim() || stdout.trim()}`);
  return command.split(/\s+/).slice(2);
}

async function startHost(node: LocalNode, o: LocalNodesOptions, join: string[], signal: AbortSignal): Promise<StartedHost> {
  await createNodeNetns(node, o.segment);
  const spec: SimulatedHostSpec = {
    name: node.name,
    rootDir: node.rootDir,
    stateDir: node.stateDir,
    runDir: node.runDir,
    imageCacheDir: node.imageCacheDir,
    libvirtCacheDir: node.libvirtCacheDir,
    hidden: o.hidden,
    shared: o.shared,
    joinArgs: join,
    agentArgs: [
      ...o.agentArgs,
      `--internal-ip=${node.address}`,
      `--kubelet-bind-address=${node.address}`,
      `--qemu-uid-base=${node.qemuUidBase}`,
    ],
    cgroupParent: node.cgroupParent,
    cgroups: await cgroupMounts(),
    gracePeriodS: o.gracePeriodS,
    logLevel: o.logLevel,
    ...(o.storageOf ? { storage: await o.storageOf(node) } : {}),
  };
  const host = await startHostInit(node, { script: SIMULATED_HOST, spec, readyMessage: JOINED_MESSAGE, signal });
  o.log.info({ node: node.name, address: node.address }, 'simulated host joined');
  return host;
}

/** Starts nodes 2..N, one after another (each join imports images and boots an agent on a shared CPU). */
export async function startLocalNodes(o: LocalNodesOptions, signal: AbortSignal): Promise<RunningLocalNodes> {
  const started: StartedHost[] = [];
  const stop = async () => {
    await Promise.all(started.map((h) => stopHostInit(h, o.log)));
  };
  try {
    const join = o.nodes.length ? await joinArgs(o) : [];
    for (const node of o.nodes) {
      signal.throwIfAborted();
      await o.importImages(imageStoreOf(node));
      signal.throwIfAborted();
      started.push(await startHost(node, o, join, signal));
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { stop };
}

/**
 * Removes the nodes a previous run had beyond `keep` (`vkvm up --nodes 2`
 * after `--nodes 3`): their Node objects (named in their join records),
 * directories, namespaces and cgroup parents. Their VMs were stopped when
 * that run stopped.
 */
export async function removeStaleNodes(o: {
  keep: readonly LocalNode[];
  upStateDir: string;
  upRunDir: string;
  clients: KubeClients;
  log: Logger;
}): Promise<void> {
  const kept = new Set(o.keep.map((n) => String(n.index)));
  for (const index of await readdir(join(o.upStateDir, NODES_DIR)).catch(() => [] as string[])) {
    if (kept.has(index) || !/^\d+$/.test(index)) continue;
    const rootDir = join(o.upStateDir, NODES_DIR, index);
    const name = (await readJoinRecord(rootDir))?.nodeName;
    if (name)
      await o.clients.core.deleteNode({ name }).catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
    await Cgroup.removeLeftover({ parent: NODES_CGROUP_PARENT, uid: `node-${index}` });
    await rm(join(o.upRunDir, NODES_DIR, index), { recursive: true, force: true });
    await rm(rootDir, { recursive: true, force: true });
    o.log.info({ node: name, index }, 'removed a node of an earlier run');
  }
  const keptNetns = new Set(o.keep.map((n) => n.netns));
  for (const netns of await readdir(NETNS_DIR).catch(() => [] as string[])) {
    if (!/^vkvm-node-\d+$/.test(netns) || keptNetns.has(netns)) continue;
    await run(['ip', 'netns', 'del', netns]);
  }
}

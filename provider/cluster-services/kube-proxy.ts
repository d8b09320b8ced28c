// The real kube-proxy as a host component of a vkvm node (the
// `kube-proxy` subcommand of deploy/cluster's binary), so VMs reach
// ClusterIP Services and NodePorts: their traffic is routed by the node's
// bridge through this network namespace, where kube-proxy's rules are.
// The agent runs it as its child for as long as it runs (a killed agent
// takes it along; its rules stay until the next one resyncs them), starts it
// again after a back-off when it exits, and re-reads the cluster's
// configuration each time. Removing the node (vkvm reset, vkvm up's stop)
// runs `kube-proxy --cleanup`, which removes every rule and chain of every
// mode; the record of which binary ran says how.
import { spawn } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ensureClusterBinary } from '../../deploy/cluster/cluster.js';
import { writeAtomic } from '../atomic-file.js';
import { SupervisedProcess, type SupervisedCommand } from '../supervised-process.js';
import { run } from '../network/host.js';
import type { AgentConfig } from '../config.js';
import type { KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import type { Logger } from '../log.js';
import { hostKubeProxyConfig, KUBE_PROXY_CONFIG_KEY, KUBE_PROXY_CONFIGMAP } from './kube-proxy-config.js';

const RECORD = 'record.json';

export interface KubeProxyOptions {
  /** vkvm-cluster's path, or how to find it (the build cache). */
  binary: () => Promise<string>;
  /** The node's kubeconfig (kube-proxy runs as the node). */
  kubeconfig: string;
  nodeName: string;
  /** Its configuration, log and record: <state-dir>/kube-proxy. */
  dir: string;
  /** The cluster's KubeProxyConfiguration text; undefined when the cluster has none. */
  readClusterConfig: () => Promise<string | undefined>;
  logLevel: string;
  log: Logger;
}

/** What a run left for its cleanup. */
interface KubeProxyRecord {
  binary: string;
}

/** Runs `binary kube-proxy ARGS`, resolving with its exit code and output. */
function runKubeProxy(binary: string, args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, ['kube-proxy', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    for (const s of [child.stdout, child.stderr]) s.on('data', (d: Buffer) => (output += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, output }));
  });
}

/**
 * Removes what kube-proxy made in this network namespace (`kube-proxy
 * --cleanup`: its iptables, ipvs and nftables rules) and its directory.
 * Nothing when no kube-proxy ran here. Idempotent.
 */
export async function cleanupKubeProxy(dir: string, log: Logger): Promise<void> {
  const text = await readFile(join(dir, RECORD), 'utf8').catch(() => undefined);
  if (text === undefined) return;
  const { binary } = JSON.parse(text) as KubeProxyRecord;
  const { code, output } = await runKubeProxy(binary, ['--cleanup']);
  // It reports the modes it found nothing of (ipvs without its module) as errors too; what it removed is gone either way.
  if (code !== 0) log.warn({ code, output: output.trim().split('\n').slice(-5) }, 'kube-proxy --cleanup reported errors');
  for (const command of ['iptables', 'ip6tables'] as const) await removeKubeChains(command);
  await rm(dir, { recursive: true, force: true });
  log.info('kube-proxy’s rules removed');
}

/**
 * What `kube-proxy --cleanup` leaves (Kubernetes 1.33): its canary chains in
 * every table, KUBE-FIREWALL with the INPUT and OUTPUT rules jumping to it, and
 * KUBE-MARK-MASQ. On a vkvm host no kubelet shares the KUBE- prefix, so every
 * rule jumping to a KUBE- chain goes, then every such chain.
 */
export async function removeKubeChains(command: 'iptables' | 'ip6tables'): Promise<void> {
  for (const table of ['filter', 'nat', 'mangle']) {
    const rules = await run([command, '-w', '-t', table, '-S']).catch(() => '');
    const lines = rules.split('\n');
    // `-S` prints each rule as its arguments, shell-quoted (comments): a shell reads them back.
    for (const rule of lines.filter((l) => /^-A (?!KUBE-)\S+ .*-j KUBE-/.test(l)))
      await run(['sh', '-c', `${command} -w -t ${table} ${rule.replace(/^-A/, '-D')}`]).catch(() => undefined);
    const chains = lines.map((l) => /^-N (KUBE-\S+)$/.exec(l)?.[1]).filter((c): c is string => !!c);
    for (const chain of chains) await run([command, '-w', '-t', table, '-F', chain]).catch(() => undefined);
    for (const chain of chains) await run([command, '-w', '-t', table, '-X', chain]).catch(() => undefined);
  }
}

export class KubeProxy {
  private readonly process: SupervisedProcess;

  constructor(private readonly o: KubeProxyOptions) {
    // Dies with the agent however the agent dies; the rules it made stay for the next one.
    this.process = new SupervisedProcess({
      name: 'kube-proxy',
      command: () => this.prepare(),
      logFile: join(o.dir, 'kube-proxy.log'),
      log: o.log,
    });
  }

  /** Starts it in the background: finding the binary may mean building it, and pods need not wait for it. */
  start(): void {
    this.process.start();
  }

  /** Stops it; with `cleanup` (the node goes), its rules go too. */
  async stop(opts: { cleanup: boolean }): Promise<void> {
    await this.process.stop();
    if (opts.cleanup) await cleanupKubeProxy(this.o.dir, this.o.log);
  }

  /** Before each run: configuration afresh, and the record before the first rule can exist. */
  private async prepare(): Promise<SupervisedCommand> {
    const binary = await this.o.binary();
    const config = hostKubeProxyConfig(await this.o.readClusterConfig(), { kubeconfig: this.o.kubeconfig, nodeName: this.o.nodeName });
    await mkdir(this.o.dir, { recursive: true, mode: 0o700 });
    await writeAtomic(join(this.o.dir, RECORD), JSON.stringify({ binary } satisfies KubeProxyRecord), 0o600);
    const configFile = join(this.o.dir, 'config.yaml');
    await writeFile(configFile, config, { mode: 0o600 });
    await warnWithoutBridgeNetfilter(this.o.log);
    return { argv: [binary, 'kube-proxy', `--config=${configFile}`, `--v=${verbosity(this.o.logLevel)}`] };
  }
}

const verbosity = (level: string) => (level === 'debug' || level === 'trace' ? 4 : 1);

/**
 * A VM reaching a Service whose endpoint is another VM on the same bridge gets
 * its reply bridged, past the rule that undoes the DNAT, unless bridged
 * traffic is passed to iptables (br_netfilter). Said once per start.
 */
async function warnWithoutBridgeNetfilter(log: Logger): Promise<void> {
  const value = (await readFile('/proc/sys/net/bridge/bridge-nf-call-iptables', 'utf8').catch(() => '')).trim();
  if (value !== '1')
    log.warn(
      { 'net.bridge.bridge-nf-call-iptables': value || 'absent (br_netfilter not loaded)' },
      'a VM reaching a Service backed by another VM on this node needs br_netfilter (modprobe br_netfilter; sysctl net.bridge.bridge-nf-call-iptables=1)',
    );
}

/** The node's kube-proxy, as the agent runs it: its own credentials, the cluster's ConfigMap, <state-dir>/kube-proxy. */
export function startKubeProxy(config: AgentConfig, kubeProxy: { binary?: string }, clients: KubeClients, log: Logger): KubeProxy {
  const proxy = new KubeProxy({
    binary: async () => kubeProxy.binary ?? (await ensureClusterBinary(log)),
    kubeconfig: config.kubeconfigPath,
    nodeName: config.nodeName,
    dir: join(config.stateDir, 'kube-proxy'),
    readClusterConfig: async () => {
      try {
        return (await clients.core.readNamespacedConfigMap(KUBE_PROXY_CONFIGMAP)).data?.[KUBE_PROXY_CONFIG_KEY];
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    },
    logLevel: config.logLevel,
    log,
  });
  proxy.start();
  return proxy;
}

// `vkvm up`: a local control plane (unless --kubeconfig is given) plus this
// host as a node, in the foreground. Ctrl-C stops the agent, then the cluster.
import { copyFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { isIP } from 'node:net';
import { parseArgs } from 'node:util';
import { startCluster, type RunningCluster } from '../../deploy/cluster/cluster.js';
import { startAgent, type RunningAgent } from '../agent.js';
import { ConfigError, resolveAgentConfig } from '../config.js';
import { applyManifests, readManifests } from '../kube/apply.js';
import type { KubernetesObject } from '@kubernetes/client-node';
import { loadKubeConfig, makeClients, type KubeClients } from '../kube/client.js';
import { isNotFound } from '../kube/errors.js';
import { createRootLogger, type Logger } from '../log.js';
import { startControllers, type RunningControllers } from '../controllers/cluster-controllers.js';
import { packageRoot } from '../package-root.js';
import { AGENT_HELP, AGENT_OPTIONS } from './agent-flags.js';
import { onShutdownSignal } from './run-until-signal.js';
import { defaultRouteAddress } from '../node/host-facts.js';
import { DEFAULT_SUBRESOURCES_PORT, parsePort, startSubresourceApi, type RunningSubresourceApi } from '../subresources/start.js';

export const DEFAULT_UP_STATE_DIR = '/var/lib/vkvm';

export const UP_HELP = `Usage: vkvm up [--state-dir DIR] [--kubeconfig FILE] [flags]

Starts a local Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) in DIR/cluster, writes its admin
kubeconfig to DIR/kubeconfig, installs vkvm's CRDs and RBAC, and runs the
VM/VMI controllers and this host as a node in the foreground. With
--kubeconfig, uses that cluster instead of starting one. Stop with Ctrl-C;
nothing is left running.

  --state-dir DIR   state directory (default ${DEFAULT_UP_STATE_DIR})
  --control-plane-address IP
                    where the local control plane listens (default
                    127.0.0.1, this host only); give an address other hosts
                    reach to let them \`vkvm join\` it
  --subresources-port PORT
                    port of KubeVirt's subresource API (virtctl), on the
                    node's InternalIP (default 8443; 0 picks a free one)

${AGENT_HELP}`;

const PART_OF = 'app.kubernetes.io/part-of';

/**
 * Refuses to replace kubevirt.io CRDs someone else installed: in a cluster
 * that runs KubeVirt, vkvm's subset schema would take the place of
 * virt-operator's and prune what its VMs carry.
 */
async function refuseForeignCrds(clients: KubeClients, crds: KubernetesObject[]): Promise<void> {
  for (const crd of crds) {
    const existing = await clients.objects.read({ apiVersion: crd.apiVersion!, kind: crd.kind!, metadata: { name: crd.metadata!.name! } }).catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    const owner = existing?.metadata?.labels?.[PART_OF];
    if (existing && owner !== 'vkvm') {
      throw new Error(
        `customresourcedefinitions/${crd.metadata!.name} exists and is not vkvm's (${PART_OF}: ${owner ?? 'unset'}); ` +
          'vkvm would replace its schema. Use vkvm in a cluster without KubeVirt, or delete that CRD first',
      );
    }
  }
}

/** Every manifest vkvm needs in a cluster: its CRDs, then its RBAC. */
export async function installClusterManifests(kubeconfigPath: string): Promise<void> {
  const root = packageRoot();
  const crdFiles = (await readdir(join(root, 'crds'))).filter((f) => f.endsWith('.yaml')).sort();
  const crds = [];
  for (const f of crdFiles) crds.push(...(await readManifests(join(root, 'crds', f))));
  const clients = makeClients(loadKubeConfig(kubeconfigPath));
  await refuseForeignCrds(clients, crds);
  await applyManifests(clients, [...crds, ...(await readManifests(join(root, 'deploy', 'rbac.yaml')))]);
}

const UP_OPTIONS = { ...AGENT_OPTIONS, 'control-plane-address': { type: 'string' }, 'subresources-port': { type: 'string' } } as const;

/** Where the local control plane listens: loopback unless hosts elsewhere are to join it. */
function controlPlaneAddress(value: string | undefined, kubeconfig: string | undefined): string {
  if (value === undefined) return '127.0.0.1';
  if (kubeconfig) throw new ConfigError('--control-plane-address', 'applies to the local control plane; with --kubeconfig there is none');
  if (isIP(value) === 0) throw new ConfigError('--control-plane-address', `${JSON.stringify(value)} is not an IP address`);
  return value;
}

async function runUp(argv: string[], log: Logger): Promise<number> {
  const { values: flags } = parseArgs({ args: argv, options: UP_OPTIONS, strict: true });
  const { 'control-plane-address': addressFlag, 'subresources-port': subresourcesPort, ...values } = flags;
  const bindAddress = controlPlaneAddress(addressFlag, values.kubeconfig);
  const stateDir = values['state-dir'] ?? DEFAULT_UP_STATE_DIR;
  let cluster: RunningCluster | undefined;
  let kubeconfig = values.kubeconfig;
  if (!kubeconfig) {
    cluster = await startCluster({ stateDir: join(stateDir, 'cluster'), bindAddress, log: log.child({ component: 'cluster' }) });
    kubeconfig = join(stateDir, 'kubeconfig');
    await copyFile(cluster.kubeconfigPath, kubeconfig);
    log.info({ kubeconfig }, 'control plane ready');
  }
  let agent: RunningAgent | undefined;
  let controllers: RunningControllers | undefined;
  let subresources: RunningSubresourceApi | undefined;
  let stopping = false;
  const stopAll = async () => {
    stopping = true;
    // Controllers first: nothing creates VMIs or launcher pods while the agent stops its VMs.
    await controllers?.stop();
    await subresources?.close();
    await agent?.stop({ stopVms: true });
    await cluster?.stop();
  };
  try {
    await installClusterManifests(kubeconfig);
    const config = resolveAgentConfig({
      ...values,
      kubeconfig,
      'state-dir': stateDir,
      // With admin credentials the agent can approve its own serving CSR.
      'approve-serving-csr': values['approve-serving-csr'] ?? !values.kubeconfig,
    });
    const clients = makeClients(loadKubeConfig(kubeconfig));
    // On this host, at the node's address: the kube-apiserver dials it as it dials the kubelet.
    const address = config.internalIP ?? (await defaultRouteAddress());
    if (!address) throw new ConfigError('--internal-ip', 'the host has no default route; give the address the control plane reaches this host at');
    subresources = await startSubresourceApi(clients, log.child({ component: 'subresource-api' }), { address, port: parsePort('--subresources-port', subresourcesPort ?? String(DEFAULT_SUBRESOURCES_PORT)) });
    controllers = startControllers(clients, log.child({ component: 'controllers' }), { onLeading: () => subresources!.register() });
    agent = await startAgent(config, log);
    process.stdout.write(`vkvm: node ${config.nodeName} is up. Use it with: export KUBECONFIG=${kubeconfig}\n`);
  } catch (err) {
    await stopAll();
    throw err;
  }
  const clusterDied = new Promise<number>((resolve) => {
    void cluster?.exited.then(async (code) => {
      if (stopping) return;
      log.error({ code }, 'control plane exited unexpectedly; stopping the agent');
      await stopAll();
      resolve(1);
    });
  });
  return Promise.race([onShutdownSignal(stopAll).then(() => 0), clusterDied]);
}

export async function upCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(UP_HELP);
    return 0;
  }
  const level = argv.find((a) => a.startsWith('--log-level='))?.split('=')[1] ?? 'info';
  return runUp(argv, createRootLogger(level));
}

// `vkvm up`: a local control plane (unless --kubeconfig is given) plus this
// host as a node, in the foreground. Ctrl-C stops the agent, then the cluster.
import { copyFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { isIP } from 'node:net';
import { parseArgs } from 'node:util';
import { ensureClusterBinaries, startCluster, type RunningCluster } from '../../deploy/cluster/cluster.js';
import { startAgent, type RunningAgent } from '../agent.js';
import { ConfigError, resolveAgentConfig, type AgentConfig } from '../config.js';
import { applyManifests, readManifests } from '../kube/apply.js';
import type { KubernetesObject } from '@kubernetes/client-node';
import { clusterCaPem, loadKubeConfig, makeClients, type KubeClients } from '../kube/client.js';
import { ensureNodeCredentials } from '../certs/node-credentials.js';
import { isNotFound } from '../kube/errors.js';
import { createRootLogger, type Logger } from '../log.js';
import { startControllers, type RunningControllers } from '../controllers/cluster-controllers.js';
import { packageRoot } from '../package-root.js';
import { AGENT_HELP, AGENT_OPTIONS } from './agent-flags.js';
import { hardFailures, PreflightError } from '../preflight/checks.js';
import { hostPreflight } from '../preflight/host.js';
import { makeStateDir } from '../preflight/state-dir.js';
import { onShutdownSignal, shutdownSignal, type ShutdownRequested } from './run-until-signal.js';
import { APPROVER_OPTIONS, approverHelp, servingCsrPolicy } from './approver-flags.js';
import { localNodeRanges } from '../controllers/serving-policy.js';
import { DEFAULT_BRIDGE } from '../network/pod-network.js';
import { importTestGuest, TEST_GUEST_IMAGE, TEST_GUEST_KERNEL_IMAGE } from '../images/test-guest-images.js';
import { defaultRouteAddress } from '../node/default-address.js';
import { DEFAULT_SUBRESOURCES_PORT, parsePort, startSubresourceApi, type RunningSubresourceApi } from '../subresources/start.js';
import { startLocalDns, type RunningLocalDns } from '../cluster-services/local-dns.js';
import { startMetricsServer, type RunningMetricsServer } from '../cluster-services/metrics-server.js';
import { localKubeProxyConfigMap } from '../cluster-services/kube-proxy-config.js';
import {
  extraNodes,
  LOCAL_CLUSTER_CIDR,
  LOCAL_CLUSTER_DOMAIN,
  NODES_HELP,
  NODES_OPTIONS,
  nodesPlan,
  prepareSegment,
  removeSegmentOf,
  startExtraNodes,
} from './up-nodes.js';
import type { RunningLocalNodes } from '../local-cluster/hosts.js';
import { startNodeStorage, type RunningNodeStorage } from '../node-storage/node-storage.js';
import { prepareStorage } from './up-storage.js';
import { controllersClients } from './up-controllers.js';
import { startSnapshotController, type RunningSnapshotController } from '../cluster-services/snapshot-controller.js';
import { startResizer } from '../cluster-services/resizer.js';
import type { RunningOwnIdentityProcess } from '../cluster-services/own-identity-process.js';
import { DATAVOLUME_CRD_NAME } from '../kubevirt/datavolume-types.js';

export const DEFAULT_UP_STATE_DIR = '/var/lib/vkvm';

export const UP_HELP = `Usage: vkvm up [--state-dir DIR] [--kubeconfig FILE] [flags]

Starts a local Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, and metrics-server for kubectl top and
HorizontalPodAutoscalers) in DIR/cluster, writes its admin
kubeconfig to DIR/kubeconfig, installs vkvm's CRDs and RBAC, imports the
test guest into the node's image store (localhost/vkvm/test-guest:v1, a
containerDisk, and localhost/vkvm/test-guest-kernel:v1, a kernel-boot image,
built from this host's Debian packages), and runs the VM/VMI controllers
(as user vkvm:controllers, credentials in DIR/controllers) and this host as a
node (as system:node:<name>) in the foreground. With --kubeconfig, uses that
cluster and its credentials instead of starting one ($KUBECONFIG is not
read: it likely names the kubeconfig an earlier vkvm up wrote). Checks the
host first and starts nothing on a failed check. Stop with Ctrl-C (or
SIGTERM) at any moment; nothing is left running, and if vkvm itself is
killed, the control plane and the VMs die with it.

  --state-dir DIR   state directory (default ${DEFAULT_UP_STATE_DIR})
  --control-plane-address IP
                    where the local control plane listens (default
                    127.0.0.1, this host only); give an address other hosts
                    reach to let them \`vkvm join\` it
  --subresources-port PORT
                    port of KubeVirt's subresource API (virtctl), on the
                    node's InternalIP (default 8443; 0 picks a free one)
${NODES_HELP}
${AGENT_HELP}
${approverHelp("the networks of this host's interfaces but the pod bridge")}`;

const PART_OF = 'app.kubernetes.io/part-of';
/** CRDs vkvm installs only where their own project has not (crds/kubevirt.ts optionalCrds). */
const OPTIONAL_CRD_NAMES: ReadonlySet<string> = new Set([DATAVOLUME_CRD_NAME]);

/** Who installed the CRD of `crd`'s name: absent, vkvm, or someone else (with their part-of label). */
async function crdOwner(clients: KubeClients, crd: KubernetesObject): Promise<'absent' | 'vkvm' | { foreign: string | undefined }> {
  const existing = await clients.objects
    .read({ apiVersion: crd.apiVersion!, kind: crd.kind!, metadata: { name: crd.metadata!.name! } })
    .catch((err: unknown) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
  if (!existing) return 'absent';
  const owner = existing.metadata?.labels?.[PART_OF];
  return owner === 'vkvm' ? 'vkvm' : { foreign: owner };
}

/**
 * Refuses to replace kubevirt.io CRDs someone else installed: in a cluster
 * that runs KubeVirt, vkvm's subset schema would take the place of
 * virt-operator's and prune what its VMs carry.
 */
async function refuseForeignCrds(clients: KubeClients, crds: KubernetesObject[]): Promise<void> {
  for (const crd of crds) {
    const owner = await crdOwner(clients, crd);
    if (typeof owner === 'object') {
      throw new Error(
        `customresourcedefinitions/${crd.metadata!.name} exists and is not vkvm's (${PART_OF}: ${owner.foreign ?? 'unset'}); ` +
          'vkvm would replace its schema. Use vkvm in a cluster without KubeVirt, or delete that CRD first',
      );
    }
  }
}

/**
 * The CRDs of another project's API vkvm serves (CDI's DataVolume) that this
 * cluster should get: those the project has not installed itself. Where it
 * has, its own controllers serve the API, and vkvm's DataVolume controller
 * stays idle (provider/controllers/datavolumes/served.ts reads the same label).
 */
async function optionalCrdsToInstall(clients: KubeClients, crds: KubernetesObject[]): Promise<KubernetesObject[]> {
  const wanted = [];
  for (const crd of crds) if (typeof (await crdOwner(clients, crd)) !== 'object') wanted.push(crd);
  return wanted;
}

/** Every manifest vkvm needs in a cluster: its CRDs, then its RBAC and admission policies. */
export async function installClusterManifests(kubeconfigPath: string): Promise<void> {
  const root = packageRoot();
  const crdFiles = (await readdir(join(root, 'crds'))).filter((f) => f.endsWith('.yaml')).sort();
  const crds = [];
  for (const f of crdFiles) crds.push(...(await readManifests(join(root, 'crds', f))));
  const clients = makeClients(loadKubeConfig(kubeconfigPath));
  const isOptional = (crd: KubernetesObject) => OPTIONAL_CRD_NAMES.has(crd.metadata!.name!);
  await refuseForeignCrds(
    clients,
    crds.filter((c) => !isOptional(c)),
  );
  const optional = await optionalCrdsToInstall(clients, crds.filter(isOptional));
  await applyManifests(clients, [
    ...crds.filter((c) => !isOptional(c)),
    ...optional,
    ...(await readManifests(join(root, 'deploy', 'rbac.yaml'))),
    ...(await readManifests(join(root, 'deploy', 'node-restriction.yaml'))),
    ...(await readManifests(join(root, 'deploy', 'kubevirt-admission.yaml'))),
    ...(await readManifests(join(root, 'deploy', 'clone-source-admission.yaml'))),
  ]);
}

/**
 * The test guest as images in the node's store (provider/images/test-guest-images.ts), so the examples
 * run on a machine without internet access. A convenience, not the node's job: without it the node
 * still runs every other image, so a failed build is an error in the log, not a failed start.
 */
async function importTestGuestImages(imageStoreDir: string, log: Logger): Promise<void> {
  const t0 = performance.now();
  try {
    const imported = await importTestGuest(imageStoreDir, { log: log.child({ component: 'test-guest' }) });
    log.info({ images: imported.map((r) => r.reference), ms: Math.round(performance.now() - t0) }, 'test guest images imported');
  } catch (err) {
    log.error(
      { err, images: [TEST_GUEST_IMAGE, TEST_GUEST_KERNEL_IMAGE] },
      'the test guest images could not be built; pods naming them will not start',
    );
  }
}

const UP_OPTIONS = {
  ...AGENT_OPTIONS,
  ...APPROVER_OPTIONS,
  ...NODES_OPTIONS,
  'control-plane-address': { type: 'string' },
  'subresources-port': { type: 'string' },
} as const;

/** Where the local control plane listens: loopback unless hosts elsewhere are to join it. */
function controlPlaneAddress(value: string | undefined, kubeconfig: string | undefined): string {
  if (value === undefined) return '127.0.0.1';
  if (kubeconfig) throw new ConfigError('--control-plane-address', 'applies to the local control plane; with --kubeconfig there is none');
  if (isIP(value) === 0) throw new ConfigError('--control-plane-address', `${JSON.stringify(value)} is not an IP address`);
  return value;
}

async function runUp(argv: string[], log: Logger, shutdown: AbortSignal): Promise<number> {
  const { values: flags } = parseArgs({ args: argv, options: UP_OPTIONS, strict: true });
  const {
    'control-plane-address': addressFlag,
    'subresources-port': subresourcesPort,
    'node-ip-ranges': ranges,
    'node-dns-pattern': dnsPattern,
    ...values
  } = flags;
  const plan = nodesPlan({ ...values, 'control-plane-address': addressFlag });
  const { nodes: _nodes, 'nodes-cidr': _nodesCidr, 'container-nodes': _containerNodes, ...agentValues } = values;
  // The segment is made only later: its range is named here.
  const servingCsr = servingCsrPolicy({ 'node-ip-ranges': ranges, 'node-dns-pattern': dnsPattern }, () => [
    ...localNodeRanges([values.bridge ?? DEFAULT_BRIDGE]),
    ...(plan.segment ? [plan.segment.range.cidr] : []),
  ]);
  const subresourcesListenPort = parsePort('--subresources-port', subresourcesPort ?? String(DEFAULT_SUBRESOURCES_PORT));
  const bindAddress = controlPlaneAddress(addressFlag ?? plan.segment?.hostAddress, values.kubeconfig);
  const stateDir = values['state-dir'] ?? DEFAULT_UP_STATE_DIR;
  const kubeconfig = values.kubeconfig ?? join(stateDir, 'kubeconfig');
  const config: AgentConfig = {
    ...resolveAgentConfig({
      ...agentValues,
      ...(plan.segment ? { 'internal-ip': plan.segment.hostAddress } : {}),
      kubeconfig,
      'state-dir': stateDir,
      // Every vkvm node runs kube-proxy, node 1 too; --kube-proxy=false leaves Services to the operator.
      'kube-proxy': values['kube-proxy'] ?? 'true',
    }),
    // Nothing is left running: VMs go when vkvm up goes, even if it is killed.
    vmsDieWithAgent: true,
  };
  // First, so the check below sees it as the agent will: the control plane's own directory inside it is
  // 0700, and its recursive mkdir would otherwise make the state dir with that mode.
  await makeStateDir(stateDir);
  // Before anything starts: a host that cannot run VMs gets no control plane either.
  const failed = hardFailures(await hostPreflight(config));
  if (failed.length) throw new PreflightError(failed, 'nothing was started');

  let cluster: RunningCluster | undefined;
  let agent: RunningAgent | undefined;
  let controllers: RunningControllers | undefined;
  let subresources: RunningSubresourceApi | undefined;
  let localNodes: RunningLocalNodes | undefined;
  let dns: RunningLocalDns | undefined;
  let storage: RunningNodeStorage | undefined;
  let snapshotController: RunningSnapshotController | undefined;
  let resizer: RunningOwnIdentityProcess | undefined;
  let metrics: RunningMetricsServer | undefined;
  const nodes = extraNodes(plan, config, stateDir);
  let stopping = false;
  const stopAll = async () => {
    stopping = true;
    // In order, each step whatever the one before did: a step that failed must not leave the rest running.
    const steps: Array<[string, () => Promise<unknown> | undefined]> = [
      // Controllers first: nothing creates VMIs or launcher pods while the agents stop their VMs.
      ['the controllers', () => controllers?.stop()],
      ['the subresource API', () => subresources?.close()],
      ['the simulated hosts', () => localNodes?.stop()],
      ['the node agent', () => agent?.stop({ stopVms: true })],
      ['the volume resizer', () => resizer?.stop()],
      ["node 1's CSI driver and sidecars", () => storage?.stop()],
      ['the snapshot controller', () => snapshotController?.stop()],
      ['the cluster DNS', () => dns?.stop()],
      ['metrics-server', () => metrics?.stop()],
      ['the control plane', () => cluster?.stop()],
      ["the nodes' segment", () => removeSegmentOf(plan)],
    ];
    for (const [what, step] of steps) await Promise.resolve(step()).catch((err: unknown) => log.error({ err }, `stopping ${what} failed`));
  };
  try {
    await prepareSegment(plan);
    if (!values.kubeconfig) {
      // Aborted by a signal, the start stops at once; later steps finish, then everything stops.
      cluster = await startCluster({
        stateDir: join(stateDir, 'cluster'),
        bindAddress,
        signal: shutdown,
        log: log.child({ component: 'cluster' }),
      });
      await copyFile(cluster.kubeconfigPath, kubeconfig);
      log.info({ kubeconfig }, 'control plane ready');
      if (config.kubeProxy) config.kubeProxy.binary = cluster.binary;
    }
    shutdown.throwIfAborted();
    await installClusterManifests(kubeconfig);
    shutdown.throwIfAborted();
    const clients = makeClients(loadKubeConfig(kubeconfig));
    // On this host, at the node's address: the kube-apiserver dials it as it dials the kubelet.
    const address = config.internalIP ?? (await defaultRouteAddress());
    if (!address)
      throw new ConfigError('--internal-ip', 'the host has no default route; give the address the control plane reaches this host at');
    if (cluster) {
      // What a kubeadm cluster has: kube-proxy's ConfigMap, and CoreDNS behind kube-dns (docs/networking.md).
      await applyManifests(clients, [localKubeProxyConfigMap(LOCAL_CLUSTER_CIDR)]);
      dns = await startLocalDns({
        coredns: (await ensureClusterBinaries(log)).coredns,
        address,
        adminKubeconfig: kubeconfig,
        domain: LOCAL_CLUSTER_DOMAIN,
        dir: join(stateDir, 'cluster-dns'),
        clients,
        log: log.child({ component: 'cluster-dns' }),
      });
      shutdown.throwIfAborted();
      // The resource metrics API (kubectl top, HorizontalPodAutoscaler); it scrapes the nodes as they join.
      metrics = await startMetricsServer({
        clusterBinary: cluster.binary,
        address,
        clients,
        dir: join(stateDir, 'metrics-server'),
        log: log.child({ component: 'metrics-server' }),
      });
      shutdown.throwIfAborted();
    }
    // Long-running, so not as admin: as `vkvm controllers` runs on a joined cluster (with --kubeconfig, as it says).
    const asControllers = cluster ? await controllersClients(clients, stateDir) : clients;
    const api = await startSubresourceApi(asControllers, log.child({ component: 'subresource-api' }), {
      address,
      port: subresourcesListenPort,
    });
    subresources = api;
    controllers = startControllers(asControllers, log.child({ component: 'controllers' }), { servingCsr, onLeading: () => api.register() });
    await importTestGuestImages(config.imageStoreDir, log);
    shutdown.throwIfAborted();
    // Node 1 runs as the node it is (not as admin), as a joined node does; with --kubeconfig, as that kubeconfig says.
    const agentConfig = cluster
      ? {
          ...config,
          kubeconfigPath: await node1Kubeconfig(clients, config, stateDir),
          servingCsrKubeconfigPath: kubeconfig,
          approveServingCsr: values['approve-serving-csr'] ?? true,
        }
      : config;
    agent = await startAgent(agentConfig, log);
    shutdown.throwIfAborted();

    // CSI volumes on every vkvm node, with the local control plane (its admin issues the provisioners' identities).
    const bins = cluster ? await ensureClusterBinaries(log) : undefined;
    const storageOf = bins
      ? await prepareStorage(clients, {
          provisionerBinary: bins.provisioner,
          snapshotterBinary: bins.snapshotter,
          logLevel: config.logLevel,
        })
      : undefined;
    if (bins)
      snapshotController = await startSnapshotController({
        binary: bins.snapshotController,
        clients,
        dir: join(stateDir, 'snapshot-controller'),
        logLevel: config.logLevel,
        log: log.child({ component: 'snapshot-controller' }),
      });
    if (storageOf && bins) {
      storage = await startNodeStorage(
        await storageOf({ name: config.nodeName, stateDir, runDir: config.runDir }),
        log.child({ component: 'node-storage' }),
      );
      resizer = await startResizer({
        binary: bins.resizer,
        csiSocket: storage.socket,
        clients,
        dir: join(stateDir, 'csi-resizer'),
        logLevel: config.logLevel,
        log: log.child({ component: 'csi-resizer' }),
      });
    }
    shutdown.throwIfAborted();
    localNodes = await startExtraNodes({
      plan,
      nodes,
      config,
      upStateDir: stateDir,
      values: agentValues,
      clients,
      adminKubeconfig: kubeconfig,
      server: clients.kc.getCurrentCluster()!.server,
      importImages: (dir) => importTestGuestImages(dir, log),
      ...(storageOf ? { storageOf } : {}),
      ...(cluster ? { clusterBinary: cluster.binary } : {}),
      log,
      signal: shutdown,
    });
    shutdown.throwIfAborted();
    const names = [config.nodeName, ...nodes.vkvm.map((n) => n.name), ...nodes.container.map((n) => n.name)];
    process.stdout.write(
      names.length === 1
        ? `vkvm: node ${config.nodeName} is up. Use it with: export KUBECONFIG=${kubeconfig}\n`
        : `vkvm: nodes ${names.join(', ')} are up. Use them with: export KUBECONFIG=${kubeconfig}\n`,
    );
  } catch (err) {
    await stopAll();
    if (shutdown.aborted) return 0;
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
  return Promise.race([onShutdownSignal(stopAll, shutdown).then(() => 0), clusterDied]);
}

async function node1Kubeconfig(admin: KubeClients, config: AgentConfig, stateDir: string): Promise<string> {
  const caPem = await clusterCaPem(admin.kc);
  return ensureNodeCredentials(admin, { nodeName: config.nodeName, stateDir, server: admin.kc.getCurrentCluster()!.server, caPem });
}

export async function upCommand(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(UP_HELP);
    return 0;
  }
  // First: until a handler exists, a signal kills vkvm before it can stop what it started.
  const shutdown = shutdownSignal();
  const level = argv.find((a) => a.startsWith('--log-level='))?.split('=')[1] ?? 'info';
  const log = createRootLogger(level);
  shutdown.addEventListener('abort', () => log.info({ signal: (shutdown.reason as ShutdownRequested).signal }, 'stopping'), { once: true });
  return runUp(argv, log, shutdown);
}

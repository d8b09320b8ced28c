// The node agent: wires registration, heartbeat, status, the serving
// certificate and the kubelet API together, and tears them down in reverse.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { AgentConfig } from './config.js';
import { clusterCaPem, makeClients, loadKubeConfig } from './kube/client.js';
import type { Logger } from './log.js';
import { startPodNetwork } from './network/node-pod-network.js';
import { ServingCertManager, type ServingPair } from './certs/serving.js';
import { ClientCertRotator } from './certs/client.js';
import { readHostFacts } from './node/host-facts.js';
import { LeaseController } from './node/lease.js';
import { NodeController } from './node/controller.js';
import { registerNode } from './node/register.js';
import { flannelHostGwAnnotations } from './network/flannel-peering.js';
import { deriveAllocatable, deriveLabels, deriveNodeStatus, pressureConditions } from './node/status.js';
import { buildHealthzServer, buildKubeletApi, rotateServingCert } from './kubelet-api/server.js';
import { kubeAuthBackend } from './kubelet-api/kube-auth-backend.js';
import { strategicMerge } from './kube/client.js';
import { createEventRecorder } from './kube/events.js';
import { PodController } from './pods/controller.js';
import { createVmAccess } from './pods/vm-access.js';
import { agentMetrics } from './metrics.js';
import { ClusterVmiSource } from './pods/vmi-source.js';
import { createPodInformer } from './pods/informer.js';
import { kubePodApi } from './pods/pod-api.js';
import { LauncherRegistry } from './launchers/registry.js';
import type { GcLoop } from './images/gc-loop.js';
import { ImageGc } from './images/image-gc.js';
import { UrlCacheGc, UrlImagesInUse } from './images/url-cache-gc.js';
import { ImageService } from './images/image-service.js';
import { PinStore } from './images/pins.js';
import { PodImages, secretReader } from './images/pod-images.js';
import { ImageStore } from './images/store.js';
import { hostResolver } from './network/resolver.js';
import { ClusterDns, readKubeDns } from './node/cluster-dns.js';
import { startKubeProxy } from './cluster-services/kube-proxy.js';
import { downloadBase } from '../vmm/disks/base-image.js';
import { startRelayServer } from './migration/agent-relay.js';
import { migrationSides } from './migration/node-sides.js';
import type { RelayServer } from './migration/relay-server.js';
import { startCsiNodeSide } from './csi-node/node-side.js';
import { VolumeImports } from './csi-node/volume-import.js';
import { downloadToFile } from '../vmm/disks/download.js';

/** How long guests get to power off when `vkvm up` stops. */
const STOP_VMS_GRACE_S = 10;

export interface RunningAgent {
  nodeUID: string;
  /**
   * Stops the agent. VMs keep running under their launchers and are
   * re-attached by the next agent, unless `stopVms` (vkvm up, whose cluster
   * goes away too) shuts them down first.
   */
  stop(opts?: { stopVms?: boolean }): Promise<void>;
}

/**
 * The image store, ready (what a crashed agent left half-written is gone),
 * the service that pulls into it, and its pins; `onPulled` after each pull.
 */
async function startImageService(config: AgentConfig, rootLog: Logger, onPulled: () => void) {
  const store = new ImageStore(config.imageStoreDir);
  await store.init();
  await store.clearIngest();
  const images = new ImageService({
    store,
    addresses: config.imageDownloads,
    localRegistries: config.localRegistries,
    verifyPullCredentials: true,
    onPulled,
    insecureRegistries: config.insecureRegistries,
    registryCaPems: await Promise.all(config.registryCaFiles.map((f) => readFile(f, 'utf8'))),
    maxParallelPulls: config.maxParallelImagePulls,
    maxImageBytes: config.imageDownloads.maxBytes,
    log: rootLog.child({ component: 'images' }),
  });
  return { store, images, pins: new PinStore(store.pinsDir) };
}

export async function startAgent(config: AgentConfig, rootLog: Logger): Promise<RunningAgent> {
  const log = rootLog.child({ component: 'agent', node: config.nodeName });
  const clients = makeClients(loadKubeConfig(config.kubeconfigPath), { watchProgressDeadlineMs: config.watchProgressDeadlineMs });
  const readFreshFacts = () =>
    readHostFacts({
      stateDir: config.stateDir,
      imageCacheDir: config.imageCacheDir,
      imageStoreDir: config.imageStoreDir,
      searchPath: config.searchPath,
      ...(config.internalIP ? { internalIP: config.internalIP } : {}),
      allowSoftwareEmulation: config.allowSoftwareEmulation,
    });
  // The latest facts, also for the pod controller's admission (pressure conditions, allocatable), refreshed with node status.
  let latestFacts = await readFreshFacts();
  const facts = latestFacts;
  const readFacts = async () => (latestFacts = await readFreshFacts());
  if (!facts.internalIP) throw new Error('no InternalIP: pass --internal-ip or give the host a default route');
  log.info(
    { accelerator: facts.virtualization.accelerator, reason: facts.virtualization.reason, internalIP: facts.internalIP },
    'host probed',
  );

  const stops: Array<() => Promise<void> | void> = [];
  let stopVms = false;
  const stop = async (opts: { stopVms?: boolean } = {}) => {
    stopVms = opts.stopVms ?? false;
    for (const s of [...stops].reverse()) await s();
  };
  try {
    // Flannel's nodes route to this node's pod range from these (docs/networking.md).
    const node = await registerNode(clients, config, deriveLabels(config, facts), log, flannelHostGwAnnotations(facts.internalIP!));
    const nodeUID = node.metadata?.uid;
    if (!nodeUID) throw new Error('registered node has no UID');
    await clients.core.patchNodeStatus(
      { name: config.nodeName, body: { status: deriveNodeStatus(config, facts, node.status?.conditions ?? [], new Date()) } },
      strategicMerge,
    );

    const nodeController = new NodeController({ clients, config, readFacts, log: rootLog.child({ component: 'node-status' }) });
    nodeController.start();
    stops.push(() => nodeController.stop());

    const lease = new LeaseController(
      clients,
      {
        nodeName: config.nodeName,
        nodeUID,
        leaseDurationS: config.leaseDurationS,
        renewIntervalMs: config.leaseRenewIntervalS * 1000,
        // The self-check: host facts are readable and the API server answers.
        healthy: async () => {
          await readFacts();
          return true;
        },
      },
      rootLog.child({ component: 'lease' }),
    );
    await lease.renew();
    lease.start();
    stops.push(() => lease.stop());

    if (config.rotateClientCert) {
      const pemPath = clients.kc.getCurrentUser()?.certFile;
      if (!pemPath) throw new Error('--rotate-client-cert needs a kubeconfig whose user names a client-certificate file');
      const rotator = new ClientCertRotator(clients, { nodeName: config.nodeName, pemPath }, rootLog.child({ component: 'client-cert' }));
      await rotator.start();
      stops.push(() => rotator.stop());
    }

    const events = createEventRecorder(clients, { component: 'vkvm', host: config.nodeName }, rootLog.child({ component: 'events' }));
    let gc: ImageGc | undefined;
    const { store, images, pins } = await startImageService(config, rootLog, () => gc?.kick());
    stops.push(() => images.close());
    const network = startPodNetwork({ config, clients, rootLog, stops, removeAllOnStop: () => stopVms });
    if (config.kubeProxy) {
      const kubeProxy = startKubeProxy(config, config.kubeProxy, clients, rootLog.child({ component: 'kube-proxy' }));
      // Its rules go when the node's network goes.
      stops.push(() => kubeProxy.stop({ cleanup: stopVms }));
    }
    let cacheGc: UrlCacheGc | undefined;
    const launchers = new LauncherRegistry(
      {
        vmsDir: join(config.stateDir, 'vms'),
        socketDir: join(config.runDir, 'launchers'),
        imageCacheDir: config.imageCacheDir,
        libvirtCacheDir: config.libvirtCacheDir,
        hostFiles: {
          imageDirs: config.hostImageDirs,
          hostDiskDirs: config.hostDiskDirs,
          deniedDirs: [config.stateDir, config.runDir, config.imageCacheDir, config.libvirtCacheDir, config.imageStoreDir],
          // Files the agent took out of registry images, named by specs it marked itself.
          imageStoreDir: config.imageStoreDir,
        },
        downloads: config.imageDownloads,
        allowSoftwareEmulation: config.allowSoftwareEmulation,
        logLevel: config.logLevel,
        dieWithAgent: config.vmsDieWithAgent,
        cgroupParent: config.cgroupParent,
        qemuUidBase: config.qemuUidBase,
        // A removed VM's images and downloads are no longer in use: a store past its threshold need not wait a period.
        onRemoved: () => {
          gc?.kick();
          cacheGc?.kick();
        },
      },
      rootLog.child({ component: 'launchers' }),
    );
    const urlImages = new UrlImagesInUse();
    const clusterDns = new ClusterDns({
      ...(config.clusterDns ? { given: config.clusterDns } : {}),
      domain: config.clusterDomain,
      host: await hostResolver(),
      readService: () => readKubeDns((req) => clients.core.readNamespacedService(req)),
      log: rootLog.child({ component: 'cluster-dns' }),
    });
    await clusterDns.start();
    stops.push(() => clusterDns.stop());
    const vmis = new ClusterVmiSource(clients, rootLog.child({ component: 'vmi-informer' }), config.stateDir);
    const csiNode = await startCsiNodeSide({ ...config, clients, log: rootLog, publishCsiNode: true });
    stops.push(() => csiNode.stop());
    const podImages = new PodImages({ images, pins, readSecret: secretReader((req) => clients.core.readNamespacedSecret(req)), events });
    let relay: RelayServer | undefined;
    const migration =
      config.migrationPort === 0
        ? undefined
        : migrationSides({
            nodeName: config.nodeName,
            port: config.migrationPort,
            stateDir: config.stateDir,
            clients,
            launchers,
            network,
            vmis,
            images: podImages,
            dns: () => clusterDns.current(),
            relay: () => relay,
            log: rootLog,
          });
    if (migration) stops.push(() => migration.close());
    const pods = new PodController({
      pods: createPodInformer(clients, config.nodeName, rootLog.child({ component: 'pod-informer' })),
      launchers,
      vmis,
      network,
      volumes: csiNode.volumes,
      // DataVolume imports come through the node's URL policy and image store, as a VM's own images do.
      imports: new VolumeImports({
        nodeName: config.nodeName,
        clients,
        download: (url, dest, log, signal, onProgress) => downloadToFile(url, dest, config.imageDownloads, log, signal, onProgress),
        registryDisk: (pod, image, cred, log) => podImages.diskFile(pod, image, cred, log),
        scratchDir: join(config.stateDir, 'volume-imports'),
        log: rootLog.child({ component: 'volume-import' }),
      }),
      api: kubePodApi(clients),
      hostIP: () => facts.internalIP!,
      urlImages,
      dns: () => clusterDns.current(),
      guestAgent: (uid) => {
        const view = launchers.get(uid);
        if (!view?.live) return undefined;
        return {
          exec: (path, args, timeoutS) => view.client.guestExec({ path, args, timeoutS }),
          ping: () => view.client.getGuestAgentInfo(),
        };
      },
      images: podImages,
      ...(migration ? { migration } : {}),
      // The agent fetches a URL image into the cache the launchers read, under the same policy.
      downloadImage: async (url, at, log, signal) => {
        // Over --image-cache-quota-mib with nothing collectable: refused before a byte arrives.
        await cacheGc?.admit(url, at);
        await downloadBase(url, at, config.imageCacheDir, config.imageDownloads, log, signal);
        cacheGc?.kick();
      },
      // Pulls and downloads share the bound the operator sets for image pulls.
      maxParallelPreparations: config.maxParallelImagePulls,
      nodePressure: () => pressureConditions(latestFacts),
      nodeAllocatable: () => deriveAllocatable(config, latestFacts),
      accelerator: facts.virtualization.accelerator,
      events,
      metrics: agentMetrics,
      log: rootLog.child({ component: 'pods' }),
    });
    const podController = pods;
    stops.push(() => podController.stop({ stopVms, gracePeriodS: STOP_VMS_GRACE_S }));
    await pods.start();
    const volumeStats = csiNode.startVolumeStats((uid) => podController.pods().find((p) => p.metadata?.uid === uid));
    csiNode.startVolumeExpansion((uid) => {
      const view = launchers.get(uid);
      return view?.live ? { resizeDisk: (path, sizeBytes) => view.client.resizeDisk(path, sizeBytes) } : undefined;
    });
    // After the pod cache synced: a pod's pins hold until it is neither there nor has a VM.
    // A pod being deleted whose VM is gone uses its images no more (its API object may outlive the VM a moment).
    const alive = (uid: string) =>
      launchers.get(uid) !== undefined || podController.pods().some((p) => p.metadata?.uid === uid && !p.metadata.deletionTimestamp);
    // Both collectors run on the one policy and period; each is stopped with the agent.
    const gcShared = { policy: config.imageGc, periodMs: config.imageGcPeriodMs, metrics: agentMetrics };
    const started = <C extends GcLoop>(collector: C): C => {
      collector.start();
      stops.push(() => collector.stop());
      return collector;
    };
    gc = started(
      new ImageGc({
        ...gcShared,
        store,
        pins,
        alive,
        inUse: () => images.inUse(),
        quotaBytes: config.imageStoreQuotaBytes,
        log: rootLog.child({ component: 'image-gc' }),
      }),
    );
    // The URL image cache: pinned by the URLs of pods on the node and downloads under way.
    cacheGc = started(
      new UrlCacheGc({
        ...gcShared,
        dir: config.imageCacheDir,
        inUse: () => urlImages.cachePaths(config.imageCacheDir, alive),
        quotaBytes: config.imageCacheQuotaBytes,
        log: rootLog.child({ component: 'image-cache-gc' }),
      }),
    );

    const certs = new ServingCertManager(
      config.servingCsrKubeconfigPath ? makeClients(loadKubeConfig(config.servingCsrKubeconfigPath)) : clients,
      {
        nodeName: config.nodeName,
        ipAddresses: [facts.internalIP],
        dnsNames: [facts.hostname, config.nodeName].filter((v, i, a) => a.indexOf(v) === i),
        dir: join(config.stateDir, 'pki'),
        approve: config.approveServingCsr,
      },
      rootLog.child({ component: 'serving-cert' }),
    );
    const clientCaPem = await clusterCaPem(clients.kc);
    let api: FastifyInstance | undefined;
    stops.push(async () => {
      certs.stop();
      await api?.close();
      await relay?.close();
    });
    // The migration relay serves with the same certificate as the kubelet API, so it starts and rotates with it.
    const startRelay = async (pair: ServingPair): Promise<RelayServer | undefined> => {
      if (config.migrationPort === 0) return undefined;
      return startRelayServer({
        nodeName: config.nodeName,
        address: facts.internalIP!,
        port: config.migrationPort,
        credentials: { ...pair, caPem: clientCaPem },
        facts: { pods: () => podController.pods(), readVmi: (pod) => vmis.read(pod), vmsDir: join(config.stateDir, 'vms') },
        onControl: (stream) => migration?.target.accept(stream),
        log: rootLog,
      });
    };
    const serve = async (pair: ServingPair) => {
      const server = await buildKubeletApi({
        nodeName: config.nodeName,
        backend: kubeAuthBackend(clients),
        tls: { ...pair, clientCaPem },
        listPods: () => [...podController.pods()],
        vms: createVmAccess(podController, launchers, network),
        volumeStats,
        sessionLimits: config.sessionLimits,
        streamingIdleTimeoutMs: config.streamingIdleTimeoutMs,
        log: rootLog,
      });
      await server.listen({ host: config.kubeletBindAddress, port: config.kubeletPort });
      // The agent stopped while this was starting: its stop step has run already.
      if (certs.stopped) return void (await server.close());
      api = server;
      const started = await startRelay(pair);
      // Stopped while the relay started: the stop step could not see it.
      if (certs.stopped) return void (await started?.close());
      relay = started;
      certs.scheduleRenewal(pair, (next) => {
        rotateServingCert(server, { ...next, clientCaPem });
        relay?.setCredentials({ ...next, caPem: clientCaPem });
        log.info('kubelet serving certificate rotated');
      });
      log.info({ port: config.kubeletPort }, 'kubelet API serving');
    };
    const serving = certs.obtain();
    if (config.approveServingCsr) {
      // Approving its own (vkvm up): issued at once, so the API is up when the agent reports running.
      await serve(await serving);
    } else {
      // A joined node waits for the cluster's approver, which may come later: pods run meanwhile,
      // and the kubelet API (logs, exec, attach) starts once the certificate is issued.
      serving.then(serve).catch((err: unknown) => {
        if (!certs.stopped) log.error({ err }, 'kubelet API could not start; restart the agent once the cause is fixed');
      });
    }

    if (config.healthzPort > 0) {
      const healthz = await buildHealthzServer(() => {
        const last = lease.lastRenewal?.getTime() ?? 0;
        return Date.now() - last < config.leaseDurationS * 1000;
      }, rootLog);
      await healthz.listen({ host: '127.0.0.1', port: config.healthzPort });
      stops.push(() => healthz.close());
    }
    log.info({ kubeletPort: config.kubeletPort, nodeUID }, 'node agent running');
    return { nodeUID, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

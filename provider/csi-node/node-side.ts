// The agent's CSI node side, started once: the plugin watcher (registration
// and the node's CSINode), the volumes it publishes for VMs, and their stats.
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { PluginWatcher } from './plugin-watcher.js';
import { PodVolumes } from './pod-volumes.js';
import { VolumeStatsCache } from './volume-stats-cache.js';
import { VolumeExpansions, type VolumeExpansionsOptions } from './volume-expansion.js';
import { mergePatch } from '../kube/client.js';

export interface CsiNodeSide {
  volumes: PodVolumes;
  /** Starts reading the published volumes' stats periodically; `podOf` names each pod's volume. Stopped with the side. */
  startVolumeStats(podOf: (uid: string) => V1Pod | undefined): VolumeStatsCache;
  /** Starts growing published volumes whose claims were expanded; `runningVm` reaches a pod's QEMU. Stopped with the side. */
  startVolumeExpansion(runningVm: VolumeExpansionsOptions['runningVm']): VolumeExpansions;
  stop(): Promise<void>;
}

export async function startCsiNodeSide(o: {
  /** The agent's state directory: the kubelet's root dir for staging and publishing. */
  stateDir: string;
  pluginRegistryDir: string;
  nodeName: string;
  clients: KubeClients;
  log: Logger;
  /** Whether the node's CSINode lists the registered drivers (plugin-watcher.ts): the agent's side does, a take-down's does not. */
  publishCsiNode: boolean;
}): Promise<CsiNodeSide> {
  const log = o.log.child({ component: 'csi-node' });
  const plugins = new PluginWatcher({
    dir: o.pluginRegistryDir,
    ...(o.publishCsiNode ? { csiNode: { nodeName: o.nodeName, clients: o.clients } } : {}),
    log,
  });
  await plugins.start();
  log.info({ dir: o.pluginRegistryDir }, 'watching for CSI drivers');
  const volumes = new PodVolumes({ root: o.stateDir, nodeName: o.nodeName, drivers: plugins, clients: o.clients, log });
  let stats: VolumeStatsCache | undefined;
  const startVolumeStats = (podOf: (uid: string) => V1Pod | undefined): VolumeStatsCache => {
    stats = new VolumeStatsCache({
      publications: () => volumes.publications(),
      drivers: plugins,
      readPersistentVolume: (name) => o.clients.core.readPersistentVolume({ name }),
      podOf,
      log,
    });
    stats.start();
    return stats;
  };
  let expansions: VolumeExpansions | undefined;
  const startVolumeExpansion = (runningVm: VolumeExpansionsOptions['runningVm']): VolumeExpansions => {
    expansions = new VolumeExpansions({
      publications: () => volumes.publications(),
      drivers: plugins,
      readPersistentVolume: (name) => o.clients.core.readPersistentVolume({ name }),
      readClaim: (namespace, name) => o.clients.core.readNamespacedPersistentVolumeClaim({ namespace, name }),
      patchClaimStatus: (namespace, name, body) =>
        o.clients.core.patchNamespacedPersistentVolumeClaimStatus({ namespace, name, body }, mergePatch),
      runningVm,
      log: log.child({ component: 'csi-expansion' }),
    });
    expansions.start();
    return expansions;
  };
  return {
    volumes,
    startVolumeStats,
    startVolumeExpansion,
    stop: () => {
      stats?.stop();
      expansions?.stop();
      return plugins.stop();
    },
  };
}

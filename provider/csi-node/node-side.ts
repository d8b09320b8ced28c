// The agent's CSI node side, started once: the plugin watcher (registration
// and the node's CSINode) and the volumes it publishes for VMs.
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { PluginWatcher } from './plugin-watcher.js';
import { PodVolumes } from './pod-volumes.js';

export interface CsiNodeSide {
  volumes: PodVolumes;
  stop(): Promise<void>;
}

export async function startCsiNodeSide(o: {
  /** The agent's state directory: the kubelet's root dir for staging and publishing. */
  stateDir: string;
  pluginRegistryDir: string;
  nodeName: string;
  clients: KubeClients;
  log: Logger;
}): Promise<CsiNodeSide> {
  const log = o.log.child({ component: 'csi-node' });
  const plugins = new PluginWatcher({ dir: o.pluginRegistryDir, nodeName: o.nodeName, clients: o.clients, log });
  await plugins.start();
  log.info({ dir: o.pluginRegistryDir }, 'watching for CSI drivers');
  const volumes = new PodVolumes({ root: o.stateDir, nodeName: o.nodeName, drivers: plugins, clients: o.clients, log });
  return { volumes, stop: () => plugins.stop() };
}

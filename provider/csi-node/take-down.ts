// What a host's shutdown (a simulated host's stop, `vkvm reset`) does to the
// CSI volumes of the VMs it stopped: each is unpublished and unstaged through
// its driver, as the agent's sweep does, so no mount or loop device outlives
// the node's VMs. The agent is gone by then, so the node side is started
// afresh to find the drivers through the plugin registry; they must still
// run (a failure is logged, and the volumes stay for the next agent's sweep).
// Nothing here asks the API server: the node's CSINode is left as it is
// (the Node goes with a reset), and taking volumes down needs only the drivers,
// so a reset whose control plane is gone does not wait on it.
import type { KubeClients } from '../kube/client.js';
import type { Logger } from '../log.js';
import { startCsiNodeSide } from './node-side.js';

export async function takeDownCsiVolumes(o: {
  /** The agent's state directory, the kubelet's root dir. */
  stateDir: string;
  pluginRegistryDir: string;
  nodeName: string;
  clients: KubeClients;
  log: Logger;
}): Promise<void> {
  const side = await startCsiNodeSide({ ...o, publishCsiNode: false });
  try {
    await side.volumes.retainOnly(() => false);
  } finally {
    await side.stop();
  }
}

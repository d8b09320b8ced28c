// What the virtctl tests run beside a test cluster: the cluster manifests
// `vkvm up` installs, the subresource API listening on the host's
// default-route address (the apiserver dials it there), and the controllers,
// which register it with the aggregator once leading. Stopped in teardown.
import type { Test } from 'tap';
import { installClusterManifests } from '../../../provider/cli/up.js';
import { startControllers } from '../../../provider/controllers/cluster-controllers.js';
import type { KubeClients } from '../../../provider/kube/client.js';
import { defaultRouteAddress } from '../../../provider/node/default-address.js';
import { startSubresourceApi } from '../../../provider/subresources/start.js';
import { testLog, type TestCluster } from './cluster.js';

/** `controllers` are the clients the controllers run with (the admin's unless given). */
export async function startSubresourcesAndControllers(
  t: Test,
  cluster: TestCluster,
  controllers: KubeClients = cluster.clients,
): Promise<void> {
  await installClusterManifests(cluster.kubeconfigPath);
  const address = await defaultRouteAddress();
  if (!address) throw new Error('the host needs a default route: the apiserver dials the subresource API there');
  const api = await startSubresourceApi(cluster.clients, testLog, { address, port: 0 });
  t.teardown(() => api.close());
  const running = startControllers(controllers, testLog, { retryPeriodMs: 500, onLeading: () => api.register() });
  t.teardown(() => running.stop());
}

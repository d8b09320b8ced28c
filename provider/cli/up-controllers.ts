// The controllers and the subresource API under `vkvm up`, as `vkvm
// controllers` runs them on a joined cluster: with an identity of their own,
// user vkvm:controllers bound to the shipped roles (deploy/up-controllers.yaml),
// not the admin's. vkvm up, as admin, binds it and approves its client
// certificate (<state-dir>/controllers, 0700, kept across runs); they never
// hold the admin's credentials. With --kubeconfig (no local control plane)
// they run with that kubeconfig, as node 1 does.
import { join } from 'node:path';
import { ensureOwnIdentity } from '../certs/client-credentials.js';
import { applyManifests, readManifests } from '../kube/apply.js';
import { loadKubeConfig, makeClients, type KubeClients } from '../kube/client.js';
import { packageRoot } from '../package-root.js';

/** The user of the controllers' client certificate, bound in deploy/up-controllers.yaml. */
export const CONTROLLERS_USER = 'vkvm:controllers';

/** Binds the controllers' user to its roles and makes sure it has a certificate; clients acting as it. */
export async function controllersClients(admin: KubeClients, stateDir: string): Promise<KubeClients> {
  await applyManifests(admin, await readManifests(join(packageRoot(), 'deploy', 'up-controllers.yaml')));
  const kubeconfig = await ensureOwnIdentity(admin, {
    name: 'controllers',
    slug: 'controllers',
    user: CONTROLLERS_USER,
    dir: join(stateDir, 'controllers'),
  });
  return makeClients(loadKubeConfig(kubeconfig));
}

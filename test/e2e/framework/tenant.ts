// A tenant as a cluster admin gives one: a ServiceAccount bound to the `edit`
// ClusterRole in one namespace, nothing cluster-wide. Tests act through its
// token, so what a tenant cannot do is what the test sees refused.
import { KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { makeClients, type KubeClients } from '../../../provider/kube/client.js';

/** The tenant's clients, in a namespace (see testNamespace) the admin made. */
export async function createTenant(admin: KubeClients, namespace: string, name = 'tenant'): Promise<KubeClients> {
  await admin.core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await admin.kc.makeApiClient(RbacAuthorizationV1Api).createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: `${name}-edit` },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'edit' },
      subjects: [{ kind: 'ServiceAccount', name, namespace }],
    },
  });
  const issued = await admin.core.createNamespacedServiceAccountToken({
    name,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const cluster = admin.kc.getCurrentCluster()!;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name, token: issued.status!.token }],
    contexts: [{ name, cluster: cluster.name, user: name, namespace }],
    currentContext: name,
  });
  return makeClients(kc);
}

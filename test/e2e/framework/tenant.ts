// A tenant as a cluster admin gives one: a ServiceAccount bound to the `edit`
// ClusterRole in one namespace, nothing cluster-wide. Tests act through its
// token, so what a tenant cannot do is what the test sees refused.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AuthorizationV1Api, KubeConfig, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import type { Test } from 'tap';
import type { RunningCluster } from '../../../deploy/cluster/cluster.js';
import { makeClients, type KubeClients } from '../../../provider/kube/client.js';
import { apiMessage, apiStatusCode } from '../../../provider/kube/errors.js';

/**
 * The tenant's clients, in a namespace (see testNamespace) the admin made.
 * `role`: the ClusterRole bound in the namespace (`view` for a read-only user).
 */
export async function createTenant(admin: KubeClients, namespace: string, name = 'tenant', role = 'edit'): Promise<KubeClients> {
  await admin.core.createNamespacedServiceAccount({ namespace, body: { metadata: { name } } });
  await admin.kc.makeApiClient(RbacAuthorizationV1Api).createNamespacedRoleBinding({
    namespace,
    body: {
      metadata: { name: `${name}-${role}` },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: role },
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
  await untilBindingTakes(kc, namespace);
  return makeClients(kc);
}

/**
 * The API server authorizes from its informers' cache, so a binding just made
 * can be unknown to it for a moment: the tenant's first request would be
 * refused (403) by that race, not by the role. Waits until the tenant may
 * read pods there, which every role used here grants.
 */
async function untilBindingTakes(kc: KubeConfig, namespace: string): Promise<void> {
  const authz = kc.makeApiClient(AuthorizationV1Api);
  for (const deadline = Date.now() + 30_000; ; await new Promise((r) => setTimeout(r, 100))) {
    const review = await authz.createSelfSubjectAccessReview({
      body: { spec: { resourceAttributes: { namespace, verb: 'get', resource: 'pods' } } },
    });
    if (review.status?.allowed) return;
    if (Date.now() > deadline) throw new Error(`the tenant's RoleBinding in ${namespace} did not take effect in 30 s`);
  }
}

/** A kubeconfig file for `clients` (for kubectl and virtctl), removed with the test. */
export async function kubeconfigFile(t: Test, clients: KubeClients): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'vkvm-e2e-kubeconfig-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'config');
  await writeFile(file, clients.kc.exportConfig(), { mode: 0o600 });
  return file;
}

/** kubectl as the user of `clients` (a tenant's token) against `cluster`. */
export async function tenantKubectl(t: Test, cluster: RunningCluster, clients: KubeClients): Promise<RunningCluster['kubectl']> {
  const file = await kubeconfigFile(t, clients);
  // kubectl takes the last --kubeconfig given: this one, after the admin's.
  return (args, opts) => cluster.kubectl([`--kubeconfig=${file}`, ...args], opts);
}

/** How an API call ended, as a refusal test compares it: its status code (200 when it passed) and the apiserver's message. */
export async function apiOutcome(call: () => Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await call();
    return { code: 200, message: '' };
  } catch (err) {
    return { code: apiStatusCode(err) ?? 0, message: apiMessage(err) };
  }
}
